// The figures that a ManualReader collects are those of MetricsSnapshot,
// field by field, after a scripted run of limiters that end in every way.

package ratelimitotel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/metricstest"
)

// run is a limiter of the scripted run: its options, and what it is made
// to do.
type run struct {
	name   string
	opts   ratelimit.Options
	script func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Metrics)
}

// takes is a script of n requests of one tenant.
func takes(n int) func(*testing.T, *ratelimit.Limiter, *ratelimit.Metrics) {
	return func(_ *testing.T, l *ratelimit.Limiter, _ *ratelimit.Metrics) { metricstest.Take(l, n) }
}

// until takes a request of another tenant every millisecond until done
// reports true, for 10 s at most.
func until(t *testing.T, l *ratelimit.Limiter, what string, done func() bool) {
	t.Helper()
	for start := time.Now(); !done(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not %s within 10 s", what)
		}
		l.Take(context.Background(), "trigger")
	}
}

// runs returns the scripted run: together, its limiters count in every
// field of MetricsSnapshot but the rare ones (see TestFiguresAreTheSnapshots).
func runs() []run {
	owing, charged := &atomic.Bool{}, &atomic.Bool{}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	return []run{
		{"memory", ratelimit.Options{Counter: ratelimit.NewMemoryCounter(), Limit: 2}, takes(3)},
		{"shadow", ratelimit.Options{Counter: ratelimit.NewMemoryCounter(), Limit: 1, Shadow: true}, takes(4)},
		// 3 failures, allowed, limited, limited by the over-limit cache, and
		// a request whose own context had ended; the allowed and limited
		// round trips take a few milliseconds, to land in buckets of their
		// own.
		{"failing", ratelimit.Options{Limit: 1, BreakerFailures: 10, Counter: ratelimit.CounterStore(&metricstest.MapCounter{
			Errs:   []error{context.DeadlineExceeded, fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), errors.New("disk full")},
			Delays: []time.Duration{0, 0, 0, 3 * time.Millisecond, 30 * time.Millisecond},
		})}, func(_ *testing.T, l *ratelimit.Limiter, _ *ratelimit.Metrics) {
			metricstest.Take(l, 6)
			l.Take(canceled, "globex") // not in the over-limit cache
		}},
		{"closed", ratelimit.Options{Counter: metricstest.ClosedMemory(), Limit: 1, FailClosed: true}, takes(2)},
		{"breaker", ratelimit.Options{Limit: 1, BreakerFailures: 1, BreakerCooldown: time.Hour,
			Counter: ratelimit.CounterStore(&metricstest.MapCounter{Errs: []error{errors.New("disk full")}})}, takes(3)},
		{"fallback", ratelimit.Options{Counter: metricstest.ClosedMemory(), Limit: 10,
			Fallback: ratelimit.NewMemoryCounter(), FallbackLimit: 2}, takes(5)},
		{"remembered", ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 5,
			Fallback: ratelimit.NewMemoryCounter(ratelimit.MaxKeys(10))},
			func(_ *testing.T, l *ratelimit.Limiter, _ *ratelimit.Metrics) {
				for i := range 30 {
					l.Take(context.Background(), fmt.Sprint("tenant-", i))
				}
			}},
		// Owes the store what its fallback admitted: the store stays down.
		{"owing", ratelimit.Options{Counter: metricstest.RemoteMemory{MemoryCounter: ratelimit.NewMemoryCounter(), Down: owing}, Limit: 10,
			Fallback: ratelimit.NewMemoryCounter(), FallbackLimit: 5},
			func(_ *testing.T, l *ratelimit.Limiter, _ *ratelimit.Metrics) {
				metricstest.Take(l, 2)
				owing.Store(true)
				metricstest.Take(l, 3)
			}},
		// Charges the store once it answers again.
		{"charged", ratelimit.Options{Counter: metricstest.RemoteMemory{MemoryCounter: ratelimit.NewMemoryCounter(), Down: charged}, Limit: 10,
			Fallback: ratelimit.NewMemoryCounter(), FallbackLimit: 5},
			func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Metrics) {
				metricstest.Take(l, 2)
				charged.Store(true)
				metricstest.Take(l, 3)
				charged.Store(false)
				until(t, l, "charged", func() bool { return m.Snapshot().OwedCharged == 3 })
			}},
		{"inflight", ratelimit.Options{Limit: 2, Algorithm: ratelimit.InFlight}, takes(3)},
		{"leased", ratelimit.Options{Limit: 1000, Leases: true},
			func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Metrics) {
				metricstest.Take(l, 100) // hot within a few requests: blocks of its budget
				// Given back once the tenant is quiet for 50 ms.
				deadline := time.Now().Add(10 * time.Second)
				for m.Snapshot().LeaseUnitsGivenBack == 0 {
					if time.Now().After(deadline) {
						t.Fatal("no unit given back 10 s after the tenant went quiet")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}},
	}
}

// want is what the instruments should hold of the limiter name, whose
// Metrics read s: every counter's and up-down counter's data point, by
// key, from MetricsSnapshot's fields one by one.
func want(name string, s ratelimit.MetricsSnapshot) map[string]int64 {
	w := map[string]int64{}
	add := func(instrument string, n int64, kvs ...string) {
		attrs := []attribute.KeyValue{attribute.String("ratelimit.limiter", name)}
		for i := 0; i < len(kvs); i += 2 {
			attrs = append(attrs, attribute.String(kvs[i], kvs[i+1]))
		}
		w[key(instrument, attribute.NewSet(attrs...))] += n
	}
	for _, o := range []string{"allowed", "limited", "shadow-limited", "failed-open", "failed-closed"} {
		for _, d := range []string{"counter", "over-limit-cache", "fallback", "none"} {
			add("ratelimit.decisions", 0, "ratelimit.outcome", o, "ratelimit.decider", d)
		}
	}
	for _, d := range s.Decisions {
		add("ratelimit.decisions", int64(d.Count), "ratelimit.outcome", d.Outcome, "ratelimit.decider", d.By.String())
	}
	add("ratelimit.breakers", s.Breakers-s.BreakersOpen-s.BreakersHalf, "ratelimit.breaker.state", "closed")
	add("ratelimit.breakers", s.BreakersOpen, "ratelimit.breaker.state", "open")
	add("ratelimit.breakers", s.BreakersHalf, "ratelimit.breaker.state", "half-open")
	e := s.StoreErrors
	add("ratelimit.store.errors", int64(e.Timeout), "error.type", "timeout")
	add("ratelimit.store.errors", int64(e.Refused), "error.type", "refused")
	add("ratelimit.store.errors", int64(e.Configuration), "error.type", "configuration")
	add("ratelimit.store.errors", int64(e.Other), "error.type", "other")
	add("ratelimit.store.errors", int64(e.Canceled), "error.type", "canceled")
	add("ratelimit.slots", int64(s.SlotsTaken), "ratelimit.event", "taken")
	add("ratelimit.slots", int64(s.SlotsRefused), "ratelimit.event", "refused")
	add("ratelimit.slots", int64(s.SlotsExpired), "ratelimit.event", "expired")
	add("ratelimit.fallback.remembered.keys", s.Remembered)
	add("ratelimit.fallback.remembered.evicted", int64(s.RememberedEvicted))
	add("ratelimit.fallback.owed.keys", s.OwedKeys)
	add("ratelimit.fallback.owed.evicted", int64(s.OwedEvicted))
	add("ratelimit.fallback.owed.units", int64(s.OwedCharged), "ratelimit.event", "charged")
	add("ratelimit.fallback.owed.units", int64(s.OwedUnsure), "ratelimit.event", "unsure")
	add("ratelimit.lease.blocks", int64(s.LeaseBlocks))
	add("ratelimit.lease.units", int64(s.LeaseUnitsGivenBack), "ratelimit.event", "given-back")
	add("ratelimit.lease.units", int64(s.LeaseUnitsExpired), "ratelimit.event", "expired")
	return w
}

// After the scripted run, every data point is the figure of the limiter's
// MetricsSnapshot, or of the MemoryCounter's Evicted, and there is no
// other; the latency histogram has the snapshot's bounds, bucket counts,
// count and sum. Together, the run's snapshots count in every field but
// the rare ones, so that a figure read from the wrong field shows.
func TestFiguresAreTheSnapshots(t *testing.T) {
	in, reader := newInstruments(t)
	metrics := map[string]*ratelimit.Metrics{}
	for _, r := range runs() {
		l, m := metricstest.Limiter(r.opts)
		in.Add(r.name, m)
		r.script(t, l, m)
		metrics[r.name] = m
	}
	small, big := ratelimit.NewMemoryCounter(ratelimit.MaxKeys(1)), ratelimit.NewMemoryCounter()
	for _, k := range []string{"rl:a", "rl:b", "rl:c"} {
		for _, c := range []*ratelimit.MemoryCounter{small, big} {
			if _, err := c.Incr(context.Background(), k, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	in.AddMemoryCounter("small", small)
	in.AddMemoryCounter("big", big)

	// Background work (a give-back, a charge) may still move a figure:
	// compare a collection with snapshots that did not change across it.
	var rm metricdata.ResourceMetrics
	snaps := map[string]ratelimit.MetricsSnapshot{}
	for try := 0; ; try++ {
		before := map[string]ratelimit.MetricsSnapshot{}
		for name, m := range metrics {
			before[name] = m.Snapshot()
		}
		rm = collect(t, reader)
		for name, m := range metrics {
			snaps[name] = m.Snapshot()
		}
		if reflect.DeepEqual(before, snaps) {
			break
		}
		if try == 100 {
			t.Fatal("the figures kept moving during 100 collections")
		}
		time.Sleep(10 * time.Millisecond)
	}

	wantAll := map[string]int64{
		key("ratelimit.memory.evicted", attribute.NewSet(attribute.String("ratelimit.counter", "small"))): 2,
		key("ratelimit.memory.evicted", attribute.NewSet(attribute.String("ratelimit.counter", "big"))):   0,
	}
	for name, s := range snaps {
		for k, v := range want(name, s) {
			wantAll[k] = v
		}
	}
	got := sums(t, rm)
	for _, k := range slices.Sorted(maps.Keys(wantAll)) {
		if g, ok := got[k]; !ok || g != wantAll[k] {
			t.Errorf("%s = %d (found: %v), want %d", k, g, ok, wantAll[k])
		}
	}
	for k := range got {
		if _, ok := wantAll[k]; !ok {
			t.Errorf("%s = %d: a data point that no snapshot has", k, got[k])
		}
	}

	for name, s := range snaps {
		checkHistogram(t, rm, name, s.StoreLatency)
	}
	checkCoverage(t, snaps)
}

// checkHistogram fails t unless the latency histogram's data point of
// limiter name is want: a limiter that made no round trip has none, as a
// histogram that OpenTelemetry records has no point before its first
// value.
func checkHistogram(t *testing.T, rm metricdata.ResourceMetrics, name string, want ratelimit.Histogram) {
	t.Helper()
	p, ok := histogram(t, rm, name)
	if !ok {
		if want.Count != 0 {
			t.Errorf("%s: no histogram, want %d round trips", name, want.Count)
		}
		return
	}
	// OpenTelemetry's bucket counts are each bucket's own, and one more
	// past the last bound; the snapshot's add up those at or below each
	// bound, as Prometheus's do.
	var cumulative []uint64
	var n uint64
	for _, c := range p.BucketCounts {
		n += c
		cumulative = append(cumulative, n)
	}
	if !slices.Equal(p.Bounds, want.Buckets) || len(cumulative) != len(want.Counts)+1 ||
		!slices.Equal(cumulative[:len(want.Counts)], want.Counts) || n != want.Count {
		t.Errorf("%s: bounds %v, buckets %v (at or below each bound: %v); want bounds %v, at or below each: %v, %d in all",
			name, p.Bounds, p.BucketCounts, cumulative, want.Buckets, want.Counts, want.Count)
	}
	if p.Count != want.Count || math.Abs(p.Sum-want.Sum) > 1e-9*max(1, want.Sum) {
		t.Errorf("%s: %d round trips taking %v s, want %d taking %v s", name, p.Count, p.Sum, want.Count, want.Sum)
	}
}

// checkCoverage fails t unless the snapshots count, between them, in
// every field that the run means to reach, and in three buckets of the
// histogram: a field that stayed zero everywhere would not tell two
// figures apart.
func checkCoverage(t *testing.T, snaps map[string]ratelimit.MetricsSnapshot) {
	t.Helper()
	var sum ratelimit.MetricsSnapshot
	pairs := map[string]bool{}
	buckets := map[int]bool{}
	for _, s := range snaps {
		for _, d := range s.Decisions {
			if d.Count > 0 {
				pairs[d.Outcome+" "+d.By.String()] = true
			}
		}
		sum.BreakersOpen += s.BreakersOpen
		sum.Breakers += s.Breakers
		sum.StoreErrors.Timeout += s.StoreErrors.Timeout
		sum.StoreErrors.Refused += s.StoreErrors.Refused
		sum.StoreErrors.Other += s.StoreErrors.Other
		sum.StoreErrors.Canceled += s.StoreErrors.Canceled
		sum.SlotsTaken += s.SlotsTaken
		sum.SlotsRefused += s.SlotsRefused
		sum.Remembered += s.Remembered
		sum.RememberedEvicted += s.RememberedEvicted
		sum.OwedKeys += s.OwedKeys
		sum.OwedCharged += s.OwedCharged
		sum.LeaseBlocks += s.LeaseBlocks
		sum.LeaseUnitsGivenBack += s.LeaseUnitsGivenBack
		for i, c := range s.StoreLatency.Counts {
			if c > 0 && (i == 0 || c > s.StoreLatency.Counts[i-1]) {
				buckets[i] = true
			}
		}
	}
	for _, p := range []string{"allowed counter", "limited counter", "limited over-limit-cache", "shadow-limited counter",
		"failed-open none", "failed-closed none", "allowed fallback", "limited fallback"} {
		if !pairs[p] {
			t.Errorf("no decision %s in the run", p)
		}
	}
	e := sum.StoreErrors
	for field, n := range map[string]int64{
		"BreakersOpen": sum.BreakersOpen, "Breakers": sum.Breakers,
		"StoreErrors.Timeout": int64(e.Timeout), "StoreErrors.Refused": int64(e.Refused),
		"StoreErrors.Other": int64(e.Other), "StoreErrors.Canceled": int64(e.Canceled),
		"SlotsTaken": int64(sum.SlotsTaken), "SlotsRefused": int64(sum.SlotsRefused),
		"Remembered": sum.Remembered, "RememberedEvicted": int64(sum.RememberedEvicted),
		"OwedKeys": sum.OwedKeys, "OwedCharged": int64(sum.OwedCharged),
		"LeaseBlocks": int64(sum.LeaseBlocks), "LeaseUnitsGivenBack": int64(sum.LeaseUnitsGivenBack),
	} {
		if n == 0 {
			t.Errorf("%s is 0 in every snapshot of the run", field)
		}
	}
	if len(buckets) < 3 {
		t.Errorf("the round trips fell in %d buckets of the histogram, want 3 or more", len(buckets))
	}
}

// No data point carries a tenant: only the limiters' and counters' names
// and the values of the attributes listed in the package doc.
func TestNoTenantInAnyAttribute(t *testing.T) {
	in, reader := newInstruments(t)
	names := []string{}
	for _, r := range runs() {
		l, m := metricstest.Limiter(r.opts)
		in.Add(r.name, m)
		r.script(t, l, m)
		names = append(names, r.name)
	}
	allowed := map[string]bool{}
	for _, vs := range [][]string{names, states[:], causes[:], slotEvents[:], owedEvents[:], leaseEvents[:]} {
		for _, v := range vs {
			allowed[v] = true
		}
	}
	for _, d := range decisions {
		allowed[d.Outcome], allowed[d.By.String()] = true, true
	}
	for _, v := range attributeValues(collect(t, reader)) {
		if !allowed[v] {
			t.Errorf("attribute value %q is neither a limiter's name nor one of the package doc's values", v)
		}
	}
}

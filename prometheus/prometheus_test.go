package prometheus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/metricstest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// value is the value of the series of c named name with labels (pairs of
// label name and value, limiter's left out): a counter's or gauge's value,
// a histogram's count.
func value(t *testing.T, c prometheus.Collector, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// Two limiters' decisions, every pair of outcome and decider among them,
// zeros included.
func TestDecisions(t *testing.T) {
	memory, mm := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.NewMemoryCounter(), Limit: 2})
	metricstest.Take(memory, 3)
	fallback, fm := metricstest.Limiter(ratelimit.Options{Counter: metricstest.ClosedMemory(), Limit: 10,
		Fallback: ratelimit.NewMemoryCounter(), FallbackLimit: 1})
	metricstest.Take(fallback, 2)

	c := NewCollector()
	c.Add("memory", mm)
	c.Add("fallback", fm)
	var want strings.Builder
	want.WriteString(`# HELP ratelimit_decisions_total Decisions of the limiter, by how they ended and what decided them.
# TYPE ratelimit_decisions_total counter
`)
	for _, lim := range []string{"fallback", "memory"} {
		for _, o := range []string{"allowed", "limited", "shadow-limited", "failed-open", "failed-closed"} {
			for _, d := range []string{"counter", "over-limit-cache", "fallback", "none"} {
				n := map[string]int{
					"memory allowed counter":    2,
					"memory limited counter":    1,
					"fallback allowed fallback": 1,
					"fallback limited fallback": 1,
				}[lim+" "+o+" "+d]
				fmt.Fprintf(&want, "ratelimit_decisions_total{decider=%q,limiter=%q,outcome=%q} %d\n", d, lim, o, n)
			}
		}
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want.String()), "ratelimit_decisions_total"); err != nil {
		t.Error(err)
	}
}

// Each outcome and decider, from a limiter that decides so.
func TestOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  ratelimit.Options
		takes int
		want  map[[2]string]float64 // by outcome and decider; any other is 0
	}{
		{"fail open", ratelimit.Options{Counter: metricstest.ClosedMemory(), Limit: 1}, 2,
			map[[2]string]float64{{"failed-open", "none"}: 2}},
		{"fail closed", ratelimit.Options{Counter: metricstest.ClosedMemory(), Limit: 1, FailClosed: true}, 2,
			map[[2]string]float64{{"failed-closed", "none"}: 2}},
		{"shadow", ratelimit.Options{Counter: ratelimit.NewMemoryCounter(), Limit: 1, Shadow: true}, 3,
			map[[2]string]float64{{"allowed", "counter"}: 1, {"shadow-limited", "counter"}: 2}},
		{"over-limit cache", ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 1}, 4,
			map[[2]string]float64{{"allowed", "counter"}: 1, {"limited", "counter"}: 1, {"limited", "over-limit-cache"}: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, m := metricstest.Limiter(tc.opts)
			metricstest.Take(l, tc.takes)
			c := NewCollector()
			c.Add(tc.name, m)
			outcomes := []string{"allowed", "limited", "shadow-limited", "failed-open", "failed-closed"}
			deciders := []string{"counter", "over-limit-cache", "fallback", "none"}
			if n := testutil.CollectAndCount(c, "ratelimit_decisions_total"); n != len(outcomes)*len(deciders) {
				t.Errorf("%d series of ratelimit_decisions_total, want %d", n, len(outcomes)*len(deciders))
			}
			for _, o := range outcomes {
				for _, d := range deciders {
					want := tc.want[[2]string{o, d}]
					if got := value(t, c, "ratelimit_decisions_total", "limiter", tc.name, "outcome", o, "decider", d); got != want {
						t.Errorf("outcome %s, decider %s: %v decisions, want %v", o, d, got, want)
					}
				}
			}
		})
	}
}

// A failure opens the breaker, and the gauge follows it.
func TestBreakers(t *testing.T) {
	l, m := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{Errs: []error{errors.New("disk full")}}),
		Limit: 1, BreakerFailures: 1, BreakerCooldown: time.Hour})
	c := NewCollector()
	c.Add("global", m)
	const head = `# HELP ratelimit_breakers Circuit breakers of the limiter (one per store server), by state.
# TYPE ratelimit_breakers gauge
`
	for _, step := range []struct {
		takes               int
		closed, open, probe int
	}{{0, 1, 0, 0}, {1, 0, 1, 0}} {
		metricstest.Take(l, step.takes)
		want := fmt.Sprintf(head+`ratelimit_breakers{limiter="global",state="closed"} %d
ratelimit_breakers{limiter="global",state="open"} %d
ratelimit_breakers{limiter="global",state="half-open"} %d
`, step.closed, step.open, step.probe)
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_breakers"); err != nil {
			t.Errorf("after %d takes: %v", step.takes, err)
		}
	}
}

// The store's failures by cause, and every round trip in the histogram; a
// request that the over-limit cache refused made none.
func TestStore(t *testing.T) {
	counter := &metricstest.MapCounter{Errs: []error{
		context.DeadlineExceeded,
		fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED),
		errors.New("disk full"),
	}}
	l, m := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(counter), Limit: 1})
	metricstest.Take(l, 6) // 3 failures, allowed, limited, then limited by the cache
	c := NewCollector()
	c.Add("global", m)

	want := `# HELP ratelimit_store_errors_total Failed round trips of the limiter to its store, by cause; canceled: ended by the request's own context.
# TYPE ratelimit_store_errors_total counter
ratelimit_store_errors_total{cause="timeout",limiter="global"} 1
ratelimit_store_errors_total{cause="refused",limiter="global"} 1
ratelimit_store_errors_total{cause="configuration",limiter="global"} 0
ratelimit_store_errors_total{cause="other",limiter="global"} 1
ratelimit_store_errors_total{cause="canceled",limiter="global"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_store_errors_total"); err != nil {
		t.Error(err)
	}
	if counter.Calls() != 5 {
		t.Fatalf("the counter was called %d times, want 5", counter.Calls())
	}
	if got := value(t, c, "ratelimit_store_round_trip_seconds", "limiter", "global"); got != float64(counter.Calls()) {
		t.Errorf("%v round trips in the histogram, want %d", got, counter.Calls())
	}
	if got := value(t, c, "ratelimit_decisions_total", "outcome", "limited", "decider", "over-limit-cache"); got != 1 {
		t.Errorf("%v decisions by the over-limit cache, want 1", got)
	}
}

// A limiter on a MemoryCounter makes no timed round trip: its histogram is
// there, empty, with the core's buckets.
func TestHistogramBuckets(t *testing.T) {
	l, m := metricstest.Limiter(ratelimit.Options{Limit: 1})
	metricstest.Take(l, 2)
	c := NewCollector()
	c.Add("global", m)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "ratelimit_store_round_trip_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		bounds := new(ratelimit.Metrics).Snapshot().StoreLatency.Buckets
		if h.GetSampleCount() != 0 || len(h.GetBucket()) != len(bounds) || len(bounds) == 0 {
			t.Errorf("%d observations in %d buckets, want 0 in %d", h.GetSampleCount(), len(h.GetBucket()), len(bounds))
		}
		for i, b := range h.GetBucket() {
			if b.GetUpperBound() != bounds[i] {
				t.Errorf("bucket %d bounded by %v, want %v", i, b.GetUpperBound(), bounds[i])
			}
		}
		return
	}
	t.Error("no ratelimit_store_round_trip_seconds")
}

// A MemoryCounter's evictions, whether or not a limiter counts in it: one
// full at MaxKeys(1) evicts a window for each new key, one at the default
// bound none.
func TestMemoryEvictions(t *testing.T) {
	small, big := ratelimit.NewMemoryCounter(ratelimit.MaxKeys(1)), ratelimit.NewMemoryCounter()
	for _, key := range []string{"rl:a", "rl:b", "rl:c"} {
		for _, m := range []*ratelimit.MemoryCounter{small, big} {
			if _, err := m.Incr(context.Background(), key, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, lm := metricstest.Limiter(ratelimit.Options{Counter: small, Limit: 10})
	metricstest.Take(l, 1) // a fourth key: a third eviction
	c := NewCollector()
	c.Add("global", lm)
	c.AddMemoryCounter("small", small)
	c.AddMemoryCounter("big", big)
	want := `# HELP ratelimit_memory_evicted_total Live windows the MemoryCounter dropped to stay within its bound (MaxKeys).
# TYPE ratelimit_memory_evicted_total counter
ratelimit_memory_evicted_total{counter="big"} 0
ratelimit_memory_evicted_total{counter="small"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_memory_evicted_total"); err != nil {
		t.Error(err)
	}
}

package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Options.Leases on every store: a limiter of opts with Leases on each of
// three replicas (each with Metrics of its own), which on memory share
// one MemoryCounter and one fake clock, and on Redis have a client of
// their own each on the same servers.
func eachLeaseSubject(t *testing.T, opts Options, f func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration))) {
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			o := opts
			o.Leases = true
			if o.Logger == nil {
				o.Logger = newLogRecorder().logger()
			}
			var lims []*Limiter
			c, clock := s.counter(t)
			advance := time.Sleep
			for range 3 {
				o.Counter, o.Metrics = c, &Metrics{}
				if clock != nil {
					lims = append(lims, newLimiter(o, clock.Now))
					advance = clock.Advance
					continue
				}
				lims = append(lims, NewLimiter(o))
				c, _ = s.counter(t) // the next replica's own client
			}
			if clock == nil {
				clearOfTheHour(t)
			}
			f(t, lims, uniqueTenant(t), advance)
		})
	}
}

// leaseCounts adds up the lease metrics of the limiters.
func leaseCounts(lims []*Limiter) (blocks, given, expired uint64) {
	for _, l := range lims {
		s := l.opts.Metrics.Snapshot()
		blocks, given, expired = blocks+s.LeaseBlocks, given+s.LeaseUnitsGivenBack, expired+s.LeaseUnitsExpired
	}
	return blocks, given, expired
}

// 600 requests at once over three replicas with Leases, at a limit of
// 100 (per hour, so that a bucket refills nothing meanwhile): exactly 100
// allowed, in each algorithm, and with a quota of 100 beside a limit of
// 1,000; the replicas claimed blocks on the way, or the test tested
// nothing of leases.
func TestLeasesExactAcrossReplicas(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"fixed window", Options{Limit: 100, Window: time.Hour}},
		{"sliding window", Options{Limit: 100, Window: time.Hour, Algorithm: SlidingWindow}},
		{"token bucket", Options{Limit: 100, Window: time.Hour, Algorithm: TokenBucket}},
		{"quota", Options{Limit: 1000, Window: time.Hour, Quotas: []Quota{{Name: "daily", Limit: 100, Calendar: CalendarDay}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.StoreTimeout = 5 * time.Second // 600 requests at once under -race: about counting, not time
			eachLeaseSubject(t, c.opts, func(t *testing.T, lims []*Limiter, tenant string, _ func(time.Duration)) {
				decided, allowed := burstAtOnce(lims, tenant, 600)
				blocks, _, _ := leaseCounts(lims)
				if decided != 600 || allowed != 100 {
					t.Fatalf("%d of 600 decided by the store or a block, %d allowed; want all, exactly 100 allowed", decided, allowed)
				}
				if blocks == 0 {
					t.Fatal("no replica claimed a block: the burst never made the tenant hot")
				}
				u, err := lims[0].Usage(context.Background(), tenant)
				if err != nil || u[len(u)-1].Used != 100 {
					t.Fatalf("Usage = %+v, %v; want 100 used of the last limit, as the store counts it", u, err)
				}
				t.Logf("%d blocks claimed", blocks)
			})
		})
	}
}

// Three replicas that send one tenant twice its limit, steadily, for 10
// windows: each window after the first allows at least 97 % of the
// limit, and none more than it. On memory, with the replicas' clock
// stepped a millisecond at a time.
func TestLeasesUnderAdmission(t *testing.T) {
	const limit, windows = 1500, 10 // three requests a millisecond: 3,000 a second
	for _, algo := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(algo.String(), func(t *testing.T) {
			clock := newFakeClock()
			c := newMemoryCounter(clock.Now)
			var lims []*Limiter
			for range 3 {
				lims = append(lims, newLimiter(Options{Limit: limit, Window: time.Second, Algorithm: algo, Counter: c,
					Leases: true, Metrics: &Metrics{}}, clock.Now))
			}
			var allowed [windows]int
			for ms := range windows * 1000 {
				for _, l := range lims {
					if l.Take(context.Background(), "hot").Allowed {
						allowed[ms/1000]++
					}
				}
				clock.Advance(time.Millisecond)
			}
			blocks, given, expired := leaseCounts(lims)
			t.Logf("allowed per window %v; %d blocks, %d units given back, %d expired", allowed, blocks, given, expired)
			if blocks < windows {
				t.Fatalf("%d blocks claimed in %d windows: leases were not used", blocks, windows)
			}
			most := limit
			if algo == TokenBucket {
				most++ // an empty bucket's units come every interval: a second holds 1,500 intervals and may hold 1,501 arrivals
			}
			for w, n := range allowed[1:] {
				if n < limit*97/100 || n > most {
					t.Errorf("window %d allowed %d; want between 97 %% of %d and %d", w+1, n, limit, most)
				}
			}
		})
	}
}

// Setup refuses leases for InFlight, naming the field (a Counter that
// counts by Incr alone: incronly_test.go).
func TestLeasesInFlightPanics(t *testing.T) {
	defer func() {
		if r := fmt.Sprint(recover()); !strings.Contains(r, "Leases: an InFlight limiter") {
			t.Errorf("panic %q; want one naming Leases and InFlight", r)
		}
	}()
	NewLimiter(Options{Limit: 10, Window: time.Second, Algorithm: InFlight, Leases: true})
}

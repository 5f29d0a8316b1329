package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Metrics count each decision once, whichever goroutine made it.

func TestMetricsCountEachDecision(t *testing.T) {
	m := &Metrics{}
	fc := &fakeCounter{}
	app := newApp(RateLimitShared(Config{Counter: CounterStore(fc), Limit: 2, Window: time.Minute, Metrics: m}), nil)
	for range 5 {
		get(t, app, "acme")
	}
	if s := m.Snapshot(); s.Allowed != 2 || s.Limited != 3 || s.Breaker != "closed" || s.Breakers != 1 {
		t.Errorf("metrics = %+v, want 2 allowed, 3 limited, one breaker, closed", s)
	}
	// A MemoryCounter is called without a breaker, and the metrics show
	// none.
	m = &Metrics{}
	app = newApp(RateLimitShared(Config{Limit: 2, Window: time.Minute, Metrics: m}), nil)
	get(t, app, "acme")
	if s := m.Snapshot(); s.Allowed != 1 || s.Breakers != 0 {
		t.Errorf("metrics on memory = %+v, want 1 allowed and no breaker", s)
	}
}

// Each goroutine adds its decisions to one of several copies of the
// counters (decisionStripes), picked by where its stack is; Snapshot must
// add up every copy, and concurrent adds must lose none. Which copies a
// goroutine meets is the scheduler's doing (one that runs after another
// ended may reuse its stack), so each goroutine also takes from frames at
// a depth of its own: some of its takes then land in another copy than
// the last goroutine's, whatever ran when.
func TestMetricsAddUpTheDecisionsOfManyGoroutines(t *testing.T) {
	m := &Metrics{}
	lim := NewLimiter(Options{Limit: 1 << 30, Window: time.Minute, Metrics: m})
	const goroutines, each = 64, 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				atDepth(g%decisionStripes+i%2, func() {
					if d := lim.Take(context.Background(), fmt.Sprint("tenant", g)); !d.Allowed {
						t.Errorf("refused: %+v", d)
					}
				})
			}
		})
	}
	close(start)
	wg.Wait()
	used := 0
	var sum uint64
	for i := range m.decisions {
		n := m.decisions[i].n[outcomeAllowed][ByCounter].Load()
		sum += n
		if n > 0 {
			used++
		}
	}
	if used < 2 {
		t.Fatalf("the decisions went to %d copy of the counters: the test cannot tell whether Snapshot adds them up", used)
	}
	if s := m.Snapshot(); s.Allowed != goroutines*each || sum != goroutines*each {
		t.Errorf("Snapshot counts %d allowed, the %d copies hold %d; want %d", s.Allowed, used, sum, goroutines*each)
	}
}

// atDepth calls f from n frames of a kilobyte each below the caller's, so
// that f's frames sit n kilobytes further down the goroutine's stack.
//
//go:noinline
func atDepth(n int, f func()) {
	if n == 0 {
		f()
		return
	}
	var pad [1024]byte
	keep(&pad)
	atDepth(n-1, f)
}

// keep makes its caller hold pad in its frame.
//
//go:noinline
func keep(pad *[1024]byte) { pad[0] = 1 }

// OnRoundTrip hands f every round trip that the histogram counts, failed
// ones included, with the latency the histogram adds up; a MemoryCounter's
// calls are not timed and reach f none.
func TestMetricsOnRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		counter Counter // nil: a MemoryCounter
		trips   uint64
	}{
		{"counter", &fakeCounter{}, 3}, // the fourth is refused by the over-limit cache
		{"failing counter", &fakeCounter{err: errors.New("disk full")}, 4},
		{"memory", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Metrics{}
			var mu sync.Mutex
			var trips uint64
			var sum time.Duration
			m.OnRoundTrip(func(d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				trips++
				sum += d
			})
			opts := Options{Limit: 2, Window: time.Minute, Metrics: m, Logger: slog.New(slog.DiscardHandler), BreakerFailures: 10}
			if tc.counter != nil {
				opts.Counter = CounterStore(tc.counter)
			}
			lim := NewLimiter(opts)
			for range 4 {
				lim.Take(context.Background(), "acme")
			}
			h := m.Snapshot().StoreLatency
			if trips != tc.trips || h.Count != tc.trips || sum.Seconds() != h.Sum {
				t.Errorf("f saw %d round trips taking %v s; the histogram counts %d taking %v s; want %d", trips, sum.Seconds(), h.Count, h.Sum, tc.trips)
			}
		})
	}
}

// A Metrics hands its round trips to one func: a second call, or a nil
// func, is a setup mistake.
func TestMetricsOnRoundTripPanics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // OnRoundTrip was called before
		f     func(time.Duration)
	}{
		{"nil func", false, nil},
		{"second call", true, func(time.Duration) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Metrics{}
			if tc.first {
				m.OnRoundTrip(func(time.Duration) {})
			}
			defer func() {
				if msg, _ := recover().(string); !strings.HasPrefix(msg, "ratelimit: Metrics.OnRoundTrip") {
					t.Errorf("panic %q, want one of ratelimit: naming Metrics.OnRoundTrip", msg)
				}
			}()
			m.OnRoundTrip(tc.f)
		})
	}
}

// A snapshot lists every pair of outcome and decider, those that counted
// none too, each once and always in the same order: the exporters report
// each pair from the start, indexing their series by position.
func TestSnapshotListsEveryPair(t *testing.T) {
	m := &Metrics{}
	before := m.Snapshot().Decisions
	if want := 5 * 4; len(before) != want {
		t.Fatalf("%d pairs in a fresh snapshot; want %d (5 outcomes, 4 deciders)", len(before), want)
	}
	seen := map[string]bool{}
	deciders := map[Decider]bool{}
	for _, d := range before {
		pair := d.Outcome + " " + d.By.String()
		if d.Count != 0 || seen[pair] || d.By.String() == "invalid" {
			t.Errorf("pair %+v: counted, listed twice or invalid", d)
		}
		seen[pair], deciders[d.By] = true, true
	}
	for by := Decider(0); by.String() != "invalid"; by++ {
		if !deciders[by] {
			t.Errorf("Decider %q is in no pair", by)
		}
	}
	m.decided(outcomeLimited, ByCache)
	after := m.Snapshot().Decisions
	for i := range after {
		want := before[i]
		if want.Outcome == "limited" && want.By == ByCache {
			want.Count = 1
		}
		if after[i] != want {
			t.Errorf("pair %d after one decision: %+v; want %+v", i, after[i], want)
		}
	}
}

package ratelimit

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/redis/go-redis/v9"
)

// The store decides: the built-in counters take a request's cost against
// its limit in one atomic step, so that a refused request spends nothing.
// These tests run each behaviour through a Limiter, with its over-limit
// cache on, on a MemoryCounter (on a fake clock) and on real Redis (a
// single node, a cluster and a ring), in both algorithms.

// takeSubject is a store that a Limiter decides in.
type takeSubject struct {
	name    string
	redis   bool
	counter func(t *testing.T) (store.Store, *fakeClock) // the clock is nil for Redis
}

var takeSubjects = []takeSubject{
	{"memory", false, func(t *testing.T) (store.Store, *fakeClock) {
		clock := newFakeClock()
		return newMemoryCounter(clock.Now), clock
	}},
	{"redis single node", true, func(t *testing.T) (store.Store, *fakeClock) { return NewRedisCounter(newRedisClient(t)), nil }},
	{"redis cluster", true, func(t *testing.T) (store.Store, *fakeClock) { return NewRedisCounter(newClusterClient(t)), nil }},
	{"redis ring", true, func(t *testing.T) (store.Store, *fakeClock) { return NewRedisCounter(newRingClient(t)), nil }},
}

var algorithms = []Algorithm{FixedWindow, SlidingWindow}

// eachTakeSubject runs f on every subject, in each algorithm, with a
// limiter over the subject's counter that opts, and a tenant of its own.
// advance moves both the limiter's clock and the counter's, or sleeps.
func eachTakeSubject(t *testing.T, opts Options, f func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration))) {
	for _, s := range takeSubjects {
		for _, algo := range algorithms {
			t.Run(s.name+"/"+algo.String(), func(t *testing.T) {
				c, clock := s.counter(t)
				o := opts
				o.Counter, o.Algorithm = c, algo
				if o.Logger == nil {
					o.Logger = newLogRecorder().logger()
				}
				o.StoreTimeout = cmp.Or(o.StoreTimeout, countingTimeout)
				var lim *Limiter
				advance := time.Sleep
				if clock != nil {
					lim = newLimiter(o, clock.Now)
					advance = clock.Advance
				} else {
					clearOfTheHour(t)
					lim = NewLimiter(o)
				}
				f(t, lim, uniqueTenant(t), advance)
			})
		}
	}
}

// countingTimeout is the StoreTimeout of the limiters of eachTakeSubject
// and eachReplicaSubject, unless a test sets one: they test what is
// counted, not the time rule (timerule_test.go, faults_test.go and the
// chaos tests hold that), and a round trip under -race on a busy machine
// can outlast the default 100 ms, which would decide a request by the
// fallback instead of the store.
const countingTimeout = 5 * time.Second

// startOfWindow moves the store's clock (the memory store's fake one, or
// Redis's, by sleeping) to just after the n-th start of a window of
// length w from now, where windows are aligned as sliding windows are: a
// few requests made then fall in one sliding window of w, not in two,
// unless the machine stalls for most of w. Two starts on is past the
// window of any request made before, a fixed window's (which started at
// its first request) or a sliding one's, and past the window after that
// a sliding one weighs in.
func startOfWindow(t *testing.T, lim *Limiter, advance func(time.Duration), w time.Duration, n int) {
	t.Helper()
	now := storeClock(t, lim)()
	// The script reads the server's clock in whole milliseconds.
	advance(now.Truncate(w).Add(time.Duration(n)*w).Sub(now) + 2*time.Millisecond)
}

// clearOfTheHour waits, when the hour ends within the next few seconds,
// until it has begun again. On Redis a test runs on the server's clock:
// an hour's or a day's window rolled over in the middle of a test (one
// began at 16:59:59) would be a new window that the test does not expect.
func clearOfTheHour(t *testing.T) {
	const margin = 5 * time.Second
	now := time.Now()
	if wait := now.Truncate(time.Hour).Add(time.Hour).Sub(now); wait < margin {
		t.Logf("waiting %v for the hour to turn", wait)
		time.Sleep(wait + 100*time.Millisecond)
	}
}

// A refused request spends nothing, so a cheaper one after it may pass.
func TestRefusedRequestSpendsNothing(t *testing.T) {
	eachTakeSubject(t, Options{Limit: 10, Window: time.Minute}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		for i, step := range []struct {
			cost      int
			allowed   bool
			remaining int
		}{{4, true, 6}, {4, true, 2}, {4, false, 2}, {1, true, 1}, {1, true, 0}, {1, false, 0}} {
			d := lim.TakeN(context.Background(), tenant, step.cost)
			if d.Err != nil || d.By != ByCounter || d.Allowed != step.allowed || d.Remaining != step.remaining || d.Limit != 10 {
				t.Fatalf("request %d of cost %d: allowed %v, remaining %d, limit %d, by %v, err %v; want allowed %v, remaining %d, limit 10, by the counter",
					i+1, step.cost, d.Allowed, d.Remaining, d.Limit, d.By, d.Err, step.allowed, step.remaining)
			}
			// A sliding window's count falls over two windows.
			if bound := time.Duration(1+int(lim.opts.Algorithm)) * time.Minute; !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > bound) {
				t.Errorf("request %d refused with RetryAfter %v, want within %v", i+1, d.RetryAfter, bound)
			}
		}
	})
}

// A cost above the limit never fits: it is refused at once, and spends
// nothing.
func TestCostAboveTheLimitIsRefusedAtOnce(t *testing.T) {
	eachTakeSubject(t, Options{Limit: 10, Window: time.Minute}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		d := lim.TakeN(context.Background(), tenant, 11)
		if d.Allowed || d.By != ByCounter || d.Remaining != -1 || d.RetryAfter != 0 || d.Err != nil {
			t.Fatalf("cost 11 at limit 10: %+v; want refused by the counter, remaining -1 (not asked), no RetryAfter", d)
		}
		h := http2Header(d)
		if h.Get("Retry-After") != "" || h.Get("X-Ratelimit-Remaining") != "" || h.Get("X-Ratelimit-Limit") != "10" {
			t.Errorf("headers %v; want the limit, and no Retry-After nor remaining: the request never fits", h)
		}
		if d := lim.TakeN(context.Background(), tenant, 10); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("cost 10 after it: %+v; want allowed, remaining 0: the refused request spent nothing", d)
		}
	})
}

// A cost below 1 is the gateway's mistake: it counts as 1, never as a free
// pass, and is logged, one line a second at most.
func TestCostBelowOneCountsAsOne(t *testing.T) {
	rec := newLogRecorder()
	eachTakeSubject(t, Options{Limit: 10, Window: time.Minute, Logger: rec.logger()}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		for i, cost := range []int{0, -5, 1} {
			if d := lim.TakeN(context.Background(), tenant, cost); !d.Allowed || d.Remaining != 9-i {
				t.Fatalf("request %d of cost %d: %+v; want allowed, remaining %d", i+1, cost, d, 9-i)
			}
		}
	})
	lines := rec.withMsg("ratelimit: a request's cost is below 1")
	if len(lines) == 0 || lines[0].str("tenant") == "" {
		t.Fatalf("log lines %v; want one naming the tenant", lines)
	}
}

// The over-limit cache refuses a request only when the store would: after
// an expensive request was refused, a cheap one that fits still asks, and
// passes.
func TestOverLimitCacheRefusesOnlyWhatTheStoreWould(t *testing.T) {
	for _, algo := range algorithms {
		t.Run(algo.String(), func(t *testing.T) {
			clock := newFakeClock()
			w := newWindowFake(clock)
			lim := newLimiter(Options{Counter: w, Limit: 10, Window: time.Minute, Algorithm: algo}, clock.Now)
			ctx := context.Background()
			lim.TakeN(ctx, "acme", 8)
			calls := w.callsNow()
			if d := lim.TakeN(ctx, "acme", 5); d.Allowed {
				t.Fatalf("cost 5 with 2 left: allowed; want refused")
			}
			if w.callsNow() != calls+1 {
				t.Fatalf("the first refusal made %d calls, want 1", w.callsNow()-calls)
			}
			if d := lim.TakeN(ctx, "acme", 5); d.Allowed || d.Remaining != 2 || w.callsNow() != calls+1 {
				t.Fatalf("cost 5 again: %+v after %d calls; want refused by the cache, remaining 2, no call", d, w.callsNow()-calls)
			}
			if d := lim.TakeN(ctx, "acme", 2); !d.Allowed || d.Remaining != 0 || w.callsNow() != calls+2 {
				t.Fatalf("cost 2: %+v after %d calls; want allowed by the counter, remaining 0", d, w.callsNow()-calls)
			}
		})
	}
}

// http2Header is the net/http header that d writes.
func http2Header(d Decision) http.Header {
	h := http.Header{}
	d.SetHeaders(h)
	return h
}

func TestCheckCost(t *testing.T) {
	if err := NewLimiter(Options{Limit: 1, Window: time.Second}).wiring.CostErr; err != nil {
		t.Errorf("a MemoryCounter: %v, want nil", err)
	}
	err := NewLimiter(Options{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second}).wiring.CostErr
	if err == nil || !strings.Contains(err.Error(), "Counter") || !strings.Contains(err.Error(), "*ratelimit.fakeCounter") {
		t.Errorf("a Counter of your own: %v, want an error naming Counter and its type", err)
	}
}

// A Counter of your own counts one request at a time: a request of a
// higher cost is decided as a counter failure, and the counter is not
// called.
func TestCostOnACounterOfYourOwn(t *testing.T) {
	fc := &fakeCounter{}
	lim := NewLimiter(Options{Counter: CounterStore(fc), Limit: 10, Window: time.Minute, Logger: newLogRecorder().logger()})
	d := lim.TakeN(context.Background(), "acme", 3)
	if d.By != ByNone || !d.Allowed || d.Err == nil || fc.calls() != 0 {
		t.Fatalf("cost 3: %+v after %d calls; want failed open, with an error, and no call", d, fc.calls())
	}
	if d := lim.Take(context.Background(), "acme"); d.By != ByCounter || d.Remaining != 9 {
		t.Fatalf("cost 1: %+v; want counted, remaining 9", d)
	}
}

// Callers of one tenant with different costs, all at once, share round
// trips: each is decided in turn, and what the store holds afterwards is
// exactly the sum of the costs it allowed, the refused ones taken back.
func TestConcurrentCostsAddUp(t *testing.T) {
	const limit, callers = 60, 240
	var raised atomic.Bool
	opts := Options{Limit: limit, Window: time.Hour, DisableOverLimitCache: true, StoreTimeout: 10 * time.Second,
		PlanFor: func(string) Plan {
			if raised.Load() {
				return Plan{Limit: 2 * limit}
			}
			return Plan{}
		}}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		raised.Store(false)
		var mu sync.Mutex
		var allowed, counted int
		var wg sync.WaitGroup
		release := make(chan struct{})
		for i := range callers {
			cost := 1 + i%4
			wg.Go(func() {
				<-release
				d := lim.TakeN(context.Background(), tenant, cost)
				mu.Lock()
				defer mu.Unlock()
				if d.By == ByCounter {
					counted++
					if d.Allowed {
						allowed += cost
					}
				}
			})
		}
		close(release)
		wg.Wait()
		if counted != callers || allowed > limit || allowed < limit-3 {
			t.Fatalf("%d of %d callers decided by the counter, costs %d allowed; want all decided, %d at most and at least %d",
				counted, callers, allowed, limit, limit-3)
		}
		// A plan twice as large shows the count the store holds: it must
		// be what it allowed, every refused cost taken back.
		raised.Store(true)
		if d := lim.Take(context.Background(), tenant); !d.Allowed || d.Remaining != 2*limit-allowed-1 {
			t.Fatalf("after %d allowed, one more on a plan of %d: %+v; want allowed with %d remaining",
				allowed, 2*limit, d, 2*limit-allowed-1)
		}
	})
}

// TestManyKeysOfBothKindsInOneRoundTrip sends, in rounds, requests of many
// tenants to four limiters that share one counter: fixed and sliding
// windows, with costs of 1 and of 2, and different limits. Their calls meet
// in shared round trips (on a single server or a ring's shard, one script
// call carries keys of every kind), and each key must still be decided
// exactly: its limit allowed, no more, and nothing failed.
func TestManyKeysOfBothKindsInOneRoundTrip(t *testing.T) {
	const tenants, each = 8, 12 // each key is asked in each of 12 rounds
	kinds := []struct {
		name  string
		algo  Algorithm
		limit int
		cost  int
	}{
		{"fixed", FixedWindow, 5, 1},
		{"sliding", SlidingWindow, 6, 1},
		{"fixed-cost", FixedWindow, 10, 2},
		{"sliding-cost", SlidingWindow, 14, 2},
	}
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			c, _ := s.counter(t)
			var limiters []*Limiter
			for _, k := range kinds {
				limiters = append(limiters, NewLimiter(Options{Name: k.name, Counter: c, Limit: k.limit,
					Window: time.Minute, Algorithm: k.algo, StoreTimeout: 10 * time.Second, Logger: newLogRecorder().logger()}))
			}
			ids := make([]string, tenants)
			for i := range ids {
				ids[i] = uniqueTenant(t)
			}
			var mu sync.Mutex
			decided, allowed := map[[2]int]int{}, map[[2]int]int{}
			// In each round every key is asked once, all at once, so that
			// most keys of a script call have one caller: the kinds that
			// carry no costs, beside those that do.
			for range each {
				var wg sync.WaitGroup
				release := make(chan struct{})
				for k := range kinds {
					for i := range ids {
						wg.Go(func() {
							<-release
							d := limiters[k].TakeN(context.Background(), ids[i], kinds[k].cost)
							mu.Lock()
							defer mu.Unlock()
							if d.By == ByCounter || d.By == ByCache && !d.Allowed {
								decided[[2]int{k, i}]++
							}
							if d.Allowed {
								allowed[[2]int{k, i}]++
							}
						})
					}
				}
				close(release)
				wg.Wait()
			}
			for k, kind := range kinds {
				want := kind.limit / kind.cost
				for i := range ids {
					key := [2]int{k, i}
					if decided[key] != each || allowed[key] != want {
						t.Errorf("%s, tenant %d: %d of %d decided by the store, %d allowed; want all decided, %d allowed",
							kind.name, i, decided[key], each, allowed[key], want)
					}
				}
			}
		})
	}
}

// A request's cost counts in the fallback as it does in the counter: while
// the counter fails, each request of cost 4 spends 4 of the fallback's
// budget, and one that no longer fits is refused and spends nothing.
func TestFallbackTakesTheRequestsCost(t *testing.T) {
	failing := []struct {
		name    string
		counter func() store.Store
	}{
		{"closed MemoryCounter", func() store.Store { return closedCounter() }},
		{"RedisCounter on a closed client", func() store.Store {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			rdb.Close()
			return NewRedisCounter(rdb)
		}},
	}
	for _, f := range failing {
		for _, algo := range algorithms {
			t.Run(f.name+"/"+algo.String(), func(t *testing.T) {
				clock := newFakeClock()
				lim := newLimiter(Options{Counter: f.counter(), Limit: 10, Window: time.Minute, Algorithm: algo,
					Fallback: newMemoryCounter(clock.Now), FallbackLimit: 10, Logger: newLogRecorder().logger()}, clock.Now)
				for i, want := range []struct {
					allowed   bool
					remaining int
				}{{true, 6}, {true, 2}, {false, 2}} {
					d := lim.TakeN(context.Background(), "acme", 4)
					if d.By != ByFallback || d.Allowed != want.allowed || d.Remaining != want.remaining || d.Limit != 10 || d.Err == nil {
						t.Fatalf("request %d of cost 4: %+v; want decided by the fallback, allowed %v, remaining %d of 10, with the counter's error",
							i+1, d, want.allowed, want.remaining)
					}
				}
			})
		}
	}
}

package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/redis/go-redis/v9"
)

// slidingSubject is a store for the sliding window's properties: its
// limiters, and its clock: now tells the store's time, and sleepUntil
// waits for it.
type slidingSubject struct {
	name  string
	build func(t *testing.T) (newLimiter func(Options) *Limiter, now func() time.Time, sleepUntil func(time.Time))
}

var slidingSubjects = []slidingSubject{
	{"memory", func(t *testing.T) (func(Options) *Limiter, func() time.Time, func(time.Time)) {
		clock := newFakeClock()
		c := NewMemoryCounter() // on the limiter's clock
		return func(o Options) *Limiter {
				o.Counter = c
				return newLimiter(o, clock.Now)
			}, clock.Now, func(at time.Time) {
				if d := at.Sub(clock.Now()); d > 0 {
					clock.Advance(d)
				}
			}
	}},
	{"redis single node", redisSliding(func(t *testing.T) redis.UniversalClient { return newRedisClient(t) })},
	{"redis cluster", redisSliding(func(t *testing.T) redis.UniversalClient { return newClusterClient(t) })},
	{"redis ring", redisSliding(func(t *testing.T) redis.UniversalClient { return newRingClient(t) })},
}

// redisSliding is a slidingSubject on the server of client, whose clock
// (TIME) aligns the windows: now reads it, and sleepUntil sleeps on the
// test's own clock until now would read at. The limiters wait on the
// store as long as need be: these tests are about what is counted when,
// not about the time rule.
func redisSliding(client func(t *testing.T) redis.UniversalClient) func(t *testing.T) (func(Options) *Limiter, func() time.Time, func(time.Time)) {
	return func(t *testing.T) (func(Options) *Limiter, func() time.Time, func(time.Time)) {
		rdb := client(t)
		c := NewRedisCounter(rdb)
		// Every server of the tests runs on this machine's clock; any one
		// tells it.
		var node *redis.Client
		var err error
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			node, err = c.MasterForKey(context.Background(), "time")
		case *redis.Ring:
			node, err = c.GetShardClientForKey("time")
		default:
			node = c.(*redis.Client)
		}
		if err != nil {
			t.Fatal(err)
		}
		now := func() time.Time {
			server, err := node.Time(context.Background()).Result()
			if err != nil {
				t.Fatal(err)
			}
			return server
		}
		return func(o Options) *Limiter {
				o.Counter, o.StoreTimeout = c, 5*time.Second
				return NewLimiter(o)
			}, now, func(at time.Time) {
				if d := at.Sub(now()); d > 0 {
					time.Sleep(d)
				}
			}
	}
}

// burst sends n requests of tenant at once and returns how many passed.
func burst(lim *Limiter, tenant string, n int) int {
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if d := lim.Take(context.Background(), tenant); d.Allowed && d.By == ByCounter {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(allowed.Load())
}

// A full budget in one window, and another burst just after its end: the
// sliding window lets the second burst through only in proportion to the
// time elapsed, about 5 % of the budget 5 % into the window, where a fixed
// window lets it all through. How far into the window the second burst
// was decided is read on the store's clock before and after it: a burst
// under -race on a busy machine may be decided well past 5 %.
func TestSlidingWindowBoundary(t *testing.T) {
	const limit, w = 100, time.Second
	for _, s := range slidingSubjects {
		t.Run(s.name, func(t *testing.T) {
			newLim, now, sleepUntil := s.build(t)
			// Sliding: windows are aligned to multiples of w on the
			// store's clock. The first burst runs in the second half of a
			// window, which leaves it half a window to end in.
			lim := newLim(Options{Limit: limit, Window: w, Algorithm: SlidingWindow})
			tenant := uniqueTenant(t)
			boundary := now().Truncate(w).Add(w)
			if time.Until(boundary) < w/2+w/10 && s.name != "memory" {
				boundary = boundary.Add(w)
			}
			sleepUntil(boundary.Add(-w / 2))
			if n := burst(lim, tenant, limit); n != limit {
				t.Fatalf("the first burst, in the window before the boundary: %d allowed, want %d", n, limit)
			}
			if end := now(); !end.Before(boundary) {
				t.Fatalf("the first burst ended %v past the boundary it was to end before", end.Sub(boundary))
			}
			sleepUntil(boundary.Add(w / 20))
			from := now()
			n := burst(lim, tenant, limit)
			to := now()
			// A request a into the window finds the first burst weighing
			// limit × (1 - a/w): the last allowed one came at most by to,
			// and, once any was refused, the last refused one at least by
			// from (the script's clock has whole milliseconds).
			lo := float64(from.Sub(boundary).Truncate(time.Millisecond)) / float64(w)
			hi := float64(to.Sub(boundary)) / float64(w)
			if hi >= 0.5 {
				t.Fatalf("the second burst was decided from %.0f%% to %.0f%% into the window: too late to tell a sliding window from a fixed one", 100*lo, 100*hi)
			}
			if float64(n) > limit*hi+1e-9 || n < limit && float64(n) <= limit*lo-1-1e-9 {
				t.Fatalf("the second burst, decided %.1f%% to %.1f%% into the next window: %d allowed, want more than %.1f and at most %.1f",
					100*lo, 100*hi, n, limit*lo-1, limit*hi)
			}
			t.Logf("sliding window: %d of %d allowed %.1f%% to %.1f%% past the boundary", n, limit, 100*lo, 100*hi)

			// Fixed: the tenant's window starts at its first request,
			// which the store decided between first and started.
			lim = newLim(Options{Limit: limit, Window: w, Name: "fixed"})
			tenant = uniqueTenant(t)
			first := now()
			lim.Take(context.Background(), tenant)
			started := now()
			sleepUntil(first.Add(w / 2))
			if n := burst(lim, tenant, limit-1); n != limit-1 {
				t.Fatalf("fixed window, the rest of the budget before its end: %d allowed, want %d", n, limit-1)
			}
			if end := now(); !end.Before(first.Add(w)) {
				t.Fatalf("fixed window: the rest of the budget was decided until %v past the window's earliest end", end.Sub(first.Add(w)))
			}
			sleepUntil(started.Add(w + w/20))
			if n := burst(lim, tenant, limit); n != limit {
				t.Fatalf("fixed window, a burst just after its end: %d allowed, want all %d", n, limit)
			}
		})
	}
}

// A client knocking at twice its rate gets about its rate in every window:
// the requests it is refused spend nothing, so they never lock it out.
// Each request's window is told by the store's clock read before and
// after it; on a busy machine the knocks come late and unevenly, so each
// window is held to what its own knocks imply. In a window, the allowed
// requests never exceed what the window before leaves, the limit less its
// weight at the last one allowed; and a refusal means the window had
// already counted past the limit less that weight at the refusal: with
// the knocks coming to the window's end, about the limit. A store that
// counted refusals would lock the client out after the first window.
func TestSlidingWindowRate(t *testing.T) {
	const limit, w, windows = 20, 400 * time.Millisecond, 5
	for _, s := range slidingSubjects {
		t.Run(s.name, func(t *testing.T) {
			newLim, now, sleepUntil := s.build(t)
			// Every request asks the store, whose decisions the bounds
			// below are of (the over-limit cache's refusals have tests of
			// their own).
			lim := newLim(Options{Limit: limit, Window: w, Algorithm: SlidingWindow, DisableOverLimitCache: true})
			tenant := uniqueTenant(t)
			start := now().Truncate(w).Add(w)
			// Per window: the requests allowed in it; those allowed that
			// may have been decided in it or in a window beside it; how
			// far into it the last one allowed may have been decided; how
			// early the last refused one may have been.
			var (
				allowed, unsure [windows]int
				lastAllowed     [windows]time.Duration
				lastRefused     [windows]time.Duration
			)
			for i := range lastRefused {
				lastRefused[i] = -1
			}
			in := func(at time.Time) int { return int(at.Sub(start) / w) }
			const step = w / (2 * limit)
			for i := range windows * 2 * limit {
				sleepUntil(start.Add(time.Duration(i) * step))
				from := now()
				d := lim.Take(context.Background(), tenant)
				to := now()
				if d.By != ByCounter {
					t.Fatalf("request %d decided by %v: %v", i, d.By, d.Err)
				}
				a, b := in(from), in(to)
				switch {
				case a >= windows:
				case a != b && d.Allowed:
					unsure[a]++
					if b < windows {
						unsure[b]++
					}
				case a != b:
				case d.Allowed:
					allowed[a]++
					lastAllowed[a] = to.Sub(start) - time.Duration(a)*w
				default:
					lastRefused[a] = from.Sub(start) - time.Duration(a)*w
				}
			}
			t.Logf("allowed per window at twice the rate: %v (and %v that may be of either window beside them)", allowed, unsure)
			for i, n := range allowed {
				var prevLeast, prevMost int // the window before's count
				if i > 0 {
					prevLeast, prevMost = allowed[i-1], allowed[i-1]+unsure[i-1]
				}
				weight := func(prev int, into time.Duration) float64 {
					return float64(prev) * float64(w-into) / float64(w)
				}
				if most := float64(limit) - weight(prevLeast, lastAllowed[i]); float64(n) > most+1e-9 {
					t.Errorf("window %d: %d allowed; want at most %.1f, the limit less the window before's %d weighed at the last one allowed, %v in",
						i, n, most, prevLeast, lastAllowed[i])
				}
				if into := lastRefused[i]; into >= 0 {
					into = into.Truncate(time.Millisecond) // the script's clock has whole milliseconds
					if least := float64(limit) - 1 - weight(prevMost, into); float64(n+unsure[i]) <= least-1e-9 {
						t.Errorf("window %d: %d allowed (and %d unsure); want more than %.1f, the limit less one and the window before's %d weighed at the last refusal, %v in",
							i, n, unsure[i], least, prevMost, into)
					}
				}
			}
		})
	}
}

// 600 requests at once through two replicas at a limit of 100 let exactly
// 100 through, in a sliding window as in a fixed one.
func TestSlidingWindowReplicasAdmitExactlyTheLimit(t *testing.T) {
	const limit, requests = 100, 600
	for _, s := range []struct {
		name string
		two  func(t *testing.T) (store.Store, store.Store)
	}{
		{"memory", func(t *testing.T) (store.Store, store.Store) { c := NewMemoryCounter(); return c, c }},
		{"redis single node", func(t *testing.T) (store.Store, store.Store) {
			return NewRedisCounter(newRedisClient(t)), NewRedisCounter(newRedisClient(t))
		}},
		{"redis cluster", func(t *testing.T) (store.Store, store.Store) {
			return NewRedisCounter(newClusterClient(t)), NewRedisCounter(newClusterClient(t))
		}},
	} {
		t.Run(s.name, func(t *testing.T) {
			a, b := s.two(t)
			// A minute: no boundary weighs in unless the test straddles one.
			// The subject is the count, not the time rule: a generous
			// StoreTimeout keeps 600 goroutines under -race on a busy
			// machine from failing open.
			opts := Options{Limit: limit, Window: time.Minute, Algorithm: SlidingWindow, StoreTimeout: 10 * time.Second,
				Logger: newLogRecorder().logger()}
			opts.Counter = a
			la := NewLimiter(opts)
			opts.Counter = b
			lb := NewLimiter(opts)
			counted, allowed := burstAtOnce([]*Limiter{la, lb}, uniqueTenant(t), requests)
			if counted != requests || allowed != limit {
				t.Fatalf("%d of %d requests decided by the counter, %d allowed; want all decided by the counter (or refused by its cache), exactly %d allowed",
					counted, requests, allowed, limit)
			}
		})
	}
}

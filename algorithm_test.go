package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// (TIME) aligns the windows: the test reads the server's offset from its
// own clock once, and sleeps on its own.
func redisSliding(client func(t *testing.T) redis.UniversalClient) func(t *testing.T) (func(Options) *Limiter, func() time.Time, func(time.Time)) {
	return func(t *testing.T) (func(Options) *Limiter, func() time.Time, func(time.Time)) {
		rdb := client(t)
		c := NewRedisCounter(rdb)
		// Every server of the tests runs on this machine's clock; one
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
		var server time.Time
		if err == nil {
			server, err = node.Time(context.Background()).Result()
		}
		if err != nil {
			t.Fatal(err)
		}
		offset := time.Until(server)
		now := func() time.Time { return time.Now().Add(offset) }
		return func(o Options) *Limiter {
			o.Counter = c
			return NewLimiter(o)
		}, now, func(at time.Time) { time.Sleep(at.Sub(now())) }
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

// A full budget just before a window boundary, and another just after: the
// sliding window lets the second burst through only in proportion to the
// time elapsed, about 5 % of the budget 5 % into the window, where a fixed
// window lets it all through.
func TestSlidingWindowBoundary(t *testing.T) {
	const limit, w = 100, time.Second
	for _, s := range slidingSubjects {
		t.Run(s.name, func(t *testing.T) {
			newLim, now, sleepUntil := s.build(t)
			// Sliding: windows are aligned to multiples of w on the
			// store's clock.
			lim := newLim(Options{Limit: limit, Window: w, Algorithm: SlidingWindow})
			tenant := uniqueTenant(t)
			boundary := now().Truncate(w).Add(w)
			if time.Until(boundary) < w/5 && s.name != "memory" {
				boundary = boundary.Add(w)
			}
			sleepUntil(boundary.Add(-w / 10))
			if n := burst(lim, tenant, limit); n != limit {
				t.Fatalf("the first burst, just before the boundary: %d allowed, want %d", n, limit)
			}
			sleepUntil(boundary.Add(w / 20))
			n := burst(lim, tenant, limit)
			// 5 % in, the previous window weighs 95 %: 5 left, a few more
			// for a request decided a little later than 5 %.
			if n < 3 || n > 10 {
				t.Fatalf("the second burst, 5%% into the next window: %d allowed, want about 5", n)
			}
			t.Logf("sliding window: %d of %d allowed 5%% past the boundary", n, limit)

			// Fixed: the tenant's window starts at its first request.
			lim = newLim(Options{Limit: limit, Window: w, Name: "fixed"})
			tenant = uniqueTenant(t)
			start := now()
			lim.Take(context.Background(), tenant)
			sleepUntil(start.Add(w - w/10))
			if n := burst(lim, tenant, limit-1); n != limit-1 {
				t.Fatalf("fixed window, the rest of the budget before its end: %d allowed, want %d", n, limit-1)
			}
			sleepUntil(start.Add(w + w/20))
			if n := burst(lim, tenant, limit); n != limit {
				t.Fatalf("fixed window, a burst just after its end: %d allowed, want all %d", n, limit)
			}
		})
	}
}

// A client knocking at twice its rate gets about its rate in every window:
// the requests it is refused spend nothing, so they never lock it out.
func TestSlidingWindowRate(t *testing.T) {
	const limit, w, windows = 20, 400 * time.Millisecond, 5
	for _, s := range slidingSubjects {
		t.Run(s.name, func(t *testing.T) {
			newLim, now, sleepUntil := s.build(t)
			lim := newLim(Options{Limit: limit, Window: w, Algorithm: SlidingWindow})
			tenant := uniqueTenant(t)
			start := now().Truncate(w).Add(w)
			per := make([]int, windows)
			const step = w / (2 * limit)
			for i := range windows * 2 * limit {
				at := start.Add(time.Duration(i) * step)
				sleepUntil(at)
				// The window it was sent in: on a loaded machine the last
				// request can return after the last window.
				sent := min(int(now().Sub(start)/w), windows-1)
				if d := lim.Take(context.Background(), tenant); d.Allowed {
					per[sent]++
				}
			}
			for i, n := range per {
				// The first window had no window before it: its budget
				// went in its first half.
				if lo, hi := limit*4/5, limit*6/5; n < lo || n > hi {
					t.Errorf("window %d: %d allowed, want about %d (%d to %d); all windows: %v", i, n, limit, lo, hi, per)
				}
			}
			t.Logf("allowed per window at twice the rate: %v", per)
		})
	}
}

// 600 requests at once through two replicas at a limit of 100 let exactly
// 100 through, in a sliding window as in a fixed one.
func TestSlidingWindowReplicasAdmitExactlyTheLimit(t *testing.T) {
	const limit, requests = 100, 600
	for _, s := range []struct {
		name string
		two  func(t *testing.T) (Counter, Counter)
	}{
		{"memory", func(t *testing.T) (Counter, Counter) { c := NewMemoryCounter(); return c, c }},
		{"redis single node", func(t *testing.T) (Counter, Counter) {
			return NewRedisCounter(newRedisClient(t)), NewRedisCounter(newRedisClient(t))
		}},
		{"redis cluster", func(t *testing.T) (Counter, Counter) {
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

package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// windowFake is a Store of fixed windows on a fake clock, a store of a
// test's own, that counts the calls it gets. For a sliding window it keeps
// no previous window: each key's estimate is its count.
type windowFake struct {
	clock  *fakeClock
	mu     sync.Mutex
	counts map[string]int64
	starts map[string]time.Time
	calls  int
}

var _ store.Store = (*windowFake)(nil)

func newWindowFake(clock *fakeClock) *windowFake {
	return &windowFake{clock: clock, counts: map[string]int64{}, starts: map[string]time.Time{}}
}

// window returns key's window of width at now, after starting a new one
// when the last has ended. It is called with w.mu held.
func (w *windowFake) window(key string, width time.Duration, now time.Time) (start time.Time) {
	if start, ok := w.starts[key]; !ok || now.Sub(start) >= width {
		w.starts[key], w.counts[key] = now, 0
	}
	return w.starts[key]
}

func (w *windowFake) Incr(_ context.Context, key string, width time.Duration) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	w.window(key, width, w.clock.Now())
	w.counts[key]++
	return w.counts[key], nil
}

func (w *windowFake) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.All}, nil
}

func (w *windowFake) Take(_ context.Context, r *store.Request, res *store.Result) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	key, now := string(r.Key), w.clock.Now()
	start := w.window(key, r.Window, now)
	fits := w.counts[key]+r.Cost <= r.Limit
	if fits {
		w.counts[key] += r.Cost
	}
	res.Allowed = fits
	res.Counts[0] = store.Count{N: w.counts[key], Fits: fits, Left: start.Add(r.Window).Sub(now), Length: r.Window, Mark: start.UnixNano()}
	return nil
}

func (w *windowFake) Give(_ context.Context, r *store.Request, marks store.Marks) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := string(r.Key)
	if w.starts[key].UnixNano() == marks[0] {
		w.counts[key] -= min(w.counts[key], r.Cost)
	}
	return nil
}

func (w *windowFake) Reset(_ context.Context, r *store.Request) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.starts, string(r.Key))
	return nil
}

func (w *windowFake) callsNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// cacheResponse is what a client sees of one request.
type cacheResponse struct {
	status                  int
	remaining, reset, retry string
}

// cacheApp is an app limited by cfg on clock, with the tenant in X-Tenant.
func cacheApp(clock *fakeClock, cfg Config) func(tenant string) cacheResponse {
	app := newApp(fiberHandler(cfg, clock.Now), nil)
	return func(tenant string) cacheResponse {
		r := send(app.Handler(), "/", tenant)
		return cacheResponse{r.StatusCode, r.Header.Get("X-RateLimit-Remaining"),
			r.Header.Get("X-RateLimit-Reset"), r.Header.Get("Retry-After")}
	}
}

// Once the counter has counted a tenant past its limit, the rest of the
// window is refused without it, with the headers the counter would have
// given; the window's end asks the counter again.
func TestOverLimitCacheRefusesLocallyUntilTheWindowEnds(t *testing.T) {
	clock := newFakeClock()
	store := newWindowFake(clock)
	send := cacheApp(clock, Config{Counter: store, Limit: 2, Window: 10 * time.Second})

	for i, want := range []int{200, 200, 429} {
		if r := send("acme"); r.status != want {
			t.Fatalf("request %d: %d, want %d", i+1, r.status, want)
		}
	}
	if store.callsNow() != 3 {
		t.Fatalf("%d counter calls, want 3", store.callsNow())
	}
	for _, step := range []time.Duration{0, 2500 * time.Millisecond, 5 * time.Second} {
		clock.Advance(step)
		left := 10*time.Second - clock.Now().Sub(store.starts["rl:acme"])
		reset := strconv.FormatInt(window.CeilDiv(left, time.Second), 10)
		r := send("acme")
		if want := (cacheResponse{429, "0", reset, reset}); r != want {
			t.Errorf("%v later: %+v, want %+v", step, r, want)
		}
	}
	if store.callsNow() != 3 {
		t.Errorf("%d counter calls, want still 3: the refusals in the window were the cache's", store.callsNow())
	}
	// Another tenant is not refused.
	if r := send("other"); r.status != 200 {
		t.Errorf("another tenant: %d, want 200", r.status)
	}

	clock.Advance(2500 * time.Millisecond) // the window is over
	if r := send("acme"); r.status != 200 || store.callsNow() != 5 {
		t.Errorf("after the window: %d with %d counter calls, want 200 from the counter (5 calls)", r.status, store.callsNow())
	}
}

// An entry lasts maxRefusalAge at most, however long the window: a
// Limiter.Reset on another replica reaches this one within that time.
func TestOverLimitCacheForgetsAfterMaxRefusalAge(t *testing.T) {
	clock := newFakeClock()
	store := newWindowFake(clock)
	send := cacheApp(clock, Config{Counter: store, Limit: 1, Window: time.Hour})
	send("acme")
	send("acme") // refused by the counter: cached
	clock.Advance(maxRefusalAge - time.Second)
	if r := send("acme"); r.status != 429 || store.callsNow() != 2 {
		t.Fatalf("within maxRefusalAge: %d after %d counter calls, want 429 from the cache (2 calls)", r.status, store.callsNow())
	}
	clock.Advance(time.Second)
	if r := send("acme"); r.status != 429 || store.callsNow() != 3 {
		t.Fatalf("after maxRefusalAge: %d after %d counter calls, want 429 from the counter (3 calls)", r.status, store.callsNow())
	}
}

func TestOverLimitCacheCanBeTurnedOff(t *testing.T) {
	clock := newFakeClock()
	store := newWindowFake(clock)
	send := cacheApp(clock, Config{Counter: store, Limit: 1, Window: time.Minute, DisableOverLimitCache: true})
	for range 5 {
		send("acme")
	}
	if store.callsNow() != 5 {
		t.Errorf("%d counter calls for 5 requests with the cache off, want 5", store.callsNow())
	}
}

// The cache belongs to one limiter: a limiter with a higher limit on the
// same counter (the same gateway, redeployed with a new limit) is not held
// to the old limiter's refusals.
func TestOverLimitCacheIsTheLimitersOwn(t *testing.T) {
	clock := newFakeClock()
	store := newWindowFake(clock)
	strict := cacheApp(clock, Config{Counter: store, Limit: 1, Window: time.Minute})
	strict("acme")
	if r := strict("acme"); r.status != 429 {
		t.Fatalf("strict limiter: %d, want 429", r.status)
	}
	generous := cacheApp(clock, Config{Counter: store, Limit: 5, Window: time.Minute})
	if r := generous("acme"); r.status != 200 || r.remaining != "3" {
		t.Errorf("a limiter with limit 5 after 1 counted (the refusal spent nothing): %+v, want 200 with 3 remaining", r)
	}
}

func TestOverLimitCacheIsOffForAMemoryCounter(t *testing.T) {
	l := newLimiter(Options{Limit: 1, Window: time.Minute}, time.Now)
	if l.refusals != nil {
		t.Error("a limiter on a MemoryCounter has an over-limit cache; the counter is faster")
	}
	if l := newLimiter(Options{Counter: newWindowFake(newFakeClock()), Limit: 1, Window: time.Minute}, time.Now); l.refusals == nil {
		t.Error("a limiter on another counter has no over-limit cache; it is on by default")
	}
}

// However many tenants are over their limits, the cache keeps a bounded
// number of them, and the ones it keeps still refuse.
func TestOverLimitCacheIsBounded(t *testing.T) {
	r := newRefusals()
	const keys = 20 * maxRefusals
	req := &request{}
	req.setPlan(&plan{Budget: store.Budget{Limit: 5, Window: time.Hour}})
	req.Cost = 1
	refused := &store.Result{Counts: make([]store.Count, 1)}
	refused.Counts[0] = store.Count{N: 5, Left: time.Hour, Length: time.Hour}
	for i := range keys {
		req.Key = []byte("rl:t" + strconv.Itoa(i))
		r.add(req, refused, 0)
	}
	if total := r.m.Len(); total > maxRefusals || total < maxRefusals/2 {
		t.Errorf("%d keys kept after %d refusals, want between %d and %d", total, keys, maxRefusals/2, maxRefusals)
	}
	req.Key = []byte("rl:t" + strconv.Itoa(keys-1)) // the last key added
	a := &store.Result{Counts: make([]store.Count, 1)}
	if ok := r.refuse(req, a, time.Second); !ok || a.Counts[0].Left != time.Hour-time.Second {
		t.Errorf("the last key added: refused %v, left %v; want refused, %v", ok, a.Counts[0].Left, time.Hour-time.Second)
	}
	if ok := r.refuse(req, &store.Result{Counts: make([]store.Count, 1)}, maxRefusalAge); ok {
		t.Errorf("a refusal outlived maxRefusalAge, %v", maxRefusalAge)
	}
}

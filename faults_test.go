package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// switchable answers with a count, or fails while err is set.
type switchable struct {
	mu    sync.Mutex
	err   error
	n     int64
	calls int
}

func (s *switchable) Incr(context.Context, string, time.Duration) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return 0, s.err
	}
	s.n++
	return s.n, nil
}

func (s *switchable) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *switchable) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// limiterApp serves GET / behind l and returns a function that sends one
// request and returns its status.
func limiterApp(l *limiter) func() int {
	app := fiber.New()
	app.Use(l.handle)
	app.Get("/", func(c *fiber.Ctx) error { return nil })
	h := app.Handler()
	return func() int {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/")
		h(&ctx)
		return ctx.Response.StatusCode()
	}
}

func countLines(lines []string, substr string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	clock := newFakeClock()
	store := &switchable{err: errors.New("connection refused")}
	var logs syncBuffer
	m := &Metrics{}
	send := limiterApp(newLimiter(Config{
		Counter: store, Limit: 100, Window: time.Minute,
		BreakerFailures: 3, BreakerCooldown: time.Second, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, clock.Now))

	for i := range 3 {
		if got := send(); got != http.StatusOK {
			t.Fatalf("failure %d: status %d, want 200 (fail open)", i+1, got)
		}
	}
	if got := m.Snapshot().Breaker; got != BreakerOpen {
		t.Fatalf("after 3 failures the breaker is %v, want open", got)
	}
	send()
	clock.Advance(999 * time.Millisecond)
	send()
	if store.count() != 3 {
		t.Fatalf("store called %d times, want 3: an open breaker decides without it", store.count())
	}

	clock.Advance(time.Millisecond) // cool-down over: one probe, which fails
	send()
	if store.count() != 4 || m.Snapshot().Breaker != BreakerOpen {
		t.Fatalf("calls %d, breaker %v after a failed probe; want 4 and open", store.count(), m.Snapshot().Breaker)
	}
	send()
	if store.count() != 4 {
		t.Fatalf("a failed probe restarts the cool-down, but the store was called again")
	}

	store.set(nil)
	clock.Advance(time.Second)
	if got := send(); got != http.StatusOK || m.Snapshot().Breaker != BreakerClosed {
		t.Fatalf("probe on a healthy store: status %d, breaker %v; want 200, closed", got, m.Snapshot().Breaker)
	}
	send()
	if store.count() != 6 {
		t.Fatalf("store called %d times, want 6: a closed breaker asks it again", store.count())
	}

	lines := logs.lines()
	for state, want := range map[string]int{"circuit breaker open": 2, "circuit breaker half-open": 2, "circuit breaker closed": 1} {
		if got := countLines(lines, state); got != want {
			t.Errorf("%d lines say %q, want %d:\n%s", got, state, want, strings.Join(lines, "\n"))
		}
	}
	if !strings.Contains(lines[1], "connection refused") || !strings.Contains(lines[1], "failures=3") {
		t.Errorf("the open line does not give its cause: %s", lines[1])
	}
	s := m.Snapshot()
	if s.FailedOpen != 7 || s.Allowed != 2 {
		t.Errorf("metrics = %+v, want 7 failed open and 2 allowed", s)
	}
}

// blockingStore answers only when released, honoring the caller's context.
type blockingStore struct {
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (b *blockingStore) Incr(ctx context.Context, _ string, _ time.Duration) (int64, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	select {
	case <-b.release:
		return 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// While half-open, only the probe reaches the store; the rest are decided
// at once.
func TestBreakerSendsOneProbe(t *testing.T) {
	clock := newFakeClock()
	store := &blockingStore{release: make(chan struct{})}
	l := newLimiter(Config{
		Counter: store, Limit: 100, Window: time.Minute, StoreTimeout: time.Minute,
		BreakerFailures: 1, BreakerCooldown: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	}, clock.Now)
	l.breaker.failure(false, errors.New("down")) // open it
	clock.Advance(time.Second)
	send := limiterApp(l)

	probe := make(chan int)
	go func() { probe <- send() }()
	for store.callsNow() == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 50 {
		if got := send(); got != http.StatusOK {
			t.Fatalf("status %d while half-open, want 200 (fail open)", got)
		}
	}
	close(store.release)
	if got := <-probe; got != http.StatusOK {
		t.Fatalf("probe status %d", got)
	}
	if store.callsNow() != 1 {
		t.Fatalf("store called %d times while half-open, want 1 (the probe)", store.callsNow())
	}
	if got := BreakerState(l.breaker.state.Load()); got != BreakerClosed {
		t.Fatalf("breaker %v after the probe succeeded, want closed", got)
	}
}

func (b *blockingStore) callsNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// A request the breaker decides, while it is open, without the counter
// ends as the failures that opened it did: let through, or refused with 503
// under FailClosed. So does a failed probe.
func TestOpenBreakerFailsOpenOrClosed(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		want := http.StatusOK
		if failClosed {
			want = http.StatusServiceUnavailable
		}
		clock := newFakeClock()
		store := &switchable{err: errors.New("connection refused")}
		m := &Metrics{}
		send := limiterApp(newLimiter(Config{
			Counter: store, Limit: 100, Window: time.Minute, FailClosed: failClosed,
			BreakerFailures: 3, BreakerCooldown: time.Second, Metrics: m,
			Logger: slog.New(slog.DiscardHandler),
		}, clock.Now))
		check := func(stage string, calls int, breaker BreakerState) {
			t.Helper()
			if got := send(); got != want {
				t.Errorf("FailClosed=%v, %s: status %d, want %d", failClosed, stage, got, want)
			}
			if store.count() != calls || m.Snapshot().Breaker != breaker {
				t.Fatalf("FailClosed=%v, %s: %d counter calls, breaker %v; want %d, %v",
					failClosed, stage, store.count(), m.Snapshot().Breaker, calls, breaker)
			}
		}

		check("first failure", 1, BreakerClosed)
		check("second failure", 2, BreakerClosed)
		check("third failure, which opens the breaker", 3, BreakerOpen)
		for range 5 {
			check("breaker open", 3, BreakerOpen)
		}
		clock.Advance(time.Second)
		check("failed probe", 4, BreakerOpen)
		check("breaker open again", 4, BreakerOpen)

		wantMetrics := MetricsSnapshot{FailedOpen: 10, Breaker: BreakerOpen}
		if failClosed {
			wantMetrics = MetricsSnapshot{FailedClosed: 10, Breaker: BreakerOpen}
		}
		if s := m.Snapshot(); s != wantMetrics {
			t.Errorf("FailClosed=%v: metrics %+v, want %+v", failClosed, s, wantMetrics)
		}
	}
}

// Only failures in a row open the breaker: a success in between starts the
// count again.
func TestBreakerOpensOnlyOnFailuresInARow(t *testing.T) {
	const threshold = 3
	store := &switchable{}
	m := &Metrics{}
	send := limiterApp(newLimiter(Config{
		Counter: store, Limit: 100, Window: time.Minute,
		BreakerFailures: threshold, Metrics: m, Logger: slog.New(slog.DiscardHandler),
	}, newFakeClock().Now))
	fail := func(n int) {
		store.set(errors.New("connection refused"))
		for range n {
			send()
		}
	}

	fail(threshold - 1)
	store.set(nil)
	if got := send(); got != http.StatusOK {
		t.Fatalf("healthy counter: status %d, want 200", got)
	}
	fail(threshold - 1)
	if got := m.Snapshot().Breaker; got != BreakerClosed {
		t.Fatalf("%d failures, a success, %d failures: breaker %v, want closed", threshold-1, threshold-1, got)
	}
	if got := store.count(); got != 2*threshold-1 {
		t.Fatalf("counter called %d times, want %d: a closed breaker asks it every time", got, 2*threshold-1)
	}

	fail(1)
	if got := store.count(); got != 2*threshold {
		t.Fatalf("counter called %d times, want %d: the failure that opens the breaker still asks it", got, 2*threshold)
	}
	if got := m.Snapshot().Breaker; got != BreakerOpen {
		t.Fatalf("%d failures in a row: breaker %v, want open", threshold, got)
	}
	fail(1)
	if got := store.count(); got != 2*threshold {
		t.Fatalf("counter called %d times while the breaker is open, want still %d", got, 2*threshold)
	}
	if s := m.Snapshot(); s.Allowed != 1 || s.FailedOpen != 2*threshold {
		t.Errorf("metrics %+v, want 1 allowed and %d failed open", s, 2*threshold)
	}
}

func TestFallbackDecidesWhileTheStoreFails(t *testing.T) {
	m := &Metrics{}
	var logs syncBuffer
	app := newApp(RateLimitShared(Config{
		Counter: &fakeCounter{err: errors.New("down")}, Limit: 100, Window: time.Minute,
		Fallback: NewMemoryCounter(), FallbackLimit: 2, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}), nil)

	// The headers report the budget that decided, FallbackLimit, with the
	// figures a counter's decision has.
	for i, want := range []struct {
		status               int
		remaining, rateLimit string
		retryAfter           bool
	}{
		{200, "1", `"default";r=1;t=60`, false},
		{200, "0", `"default";r=0;t=60`, false},
		{429, "0", `"default";r=0;t=60`, true},
	} {
		resp := get(t, app, "acme")
		if resp.StatusCode != want.status {
			t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want.status)
		}
		for field, v := range map[string]string{
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": want.remaining,
			"X-RateLimit-Reset":     "60",
			"RateLimit-Policy":      `"default";q=2;w=60`,
			"RateLimit":             want.rateLimit,
		} {
			if got := resp.Header.Get(field); got != v {
				t.Errorf("request %d: %s = %q, want %q", i+1, field, got, v)
			}
		}
		if got := resp.Header.Get("Retry-After"); (got == "60") != want.retryAfter {
			t.Errorf("request %d: Retry-After = %q, want 60 only on the 429", i+1, got)
		}
	}
	if got := get(t, app, "globex").StatusCode; got != 200 {
		t.Errorf("another tenant: status %d, want 200 (its own fallback budget)", got)
	}
	s := m.Snapshot()
	if s.FallbackAllowed != 3 || s.FallbackLimited != 1 || s.FailedOpen != 0 {
		t.Errorf("metrics = %+v, want 3 fallback-allowed, 1 fallback-limited", s)
	}
	if lines := logs.lines(); len(lines) != 1 || !strings.Contains(lines[0], "decided by fallback") {
		t.Errorf("log = %q, want one line saying the fallback decided", lines)
	}
}

func TestFailingFallbackFailsOpenOrClosed(t *testing.T) {
	broken := NewMemoryCounter()
	broken.Close()
	for _, failClosed := range []bool{false, true} {
		m := &Metrics{}
		app := newApp(RateLimitShared(Config{
			Counter: &fakeCounter{err: errors.New("down")}, Limit: 1, Window: time.Minute,
			Fallback: broken, FailClosed: failClosed, Metrics: m,
			Logger: slog.New(slog.DiscardHandler),
		}), nil)
		want := 200
		if failClosed {
			want = 503
		}
		if got := get(t, app, "acme").StatusCode; got != want {
			t.Errorf("FailClosed=%v: status %d with both counters down, want %d", failClosed, got, want)
		}
		s := m.Snapshot()
		field := s.FailedOpen
		if failClosed {
			field = s.FailedClosed
		}
		if field != 1 {
			t.Errorf("FailClosed=%v: metrics %+v", failClosed, s)
		}
	}
}

func TestMetricsCountEachDecision(t *testing.T) {
	m := &Metrics{}
	fc := &fakeCounter{}
	app := newApp(RateLimitShared(Config{Counter: fc, Limit: 2, Window: time.Minute, Metrics: m}), nil)
	for range 5 {
		get(t, app, "acme")
	}
	if s := m.Snapshot(); s.Allowed != 2 || s.Limited != 3 || s.Breaker != BreakerClosed {
		t.Errorf("metrics = %+v, want 2 allowed, 3 limited, breaker closed", s)
	}
}

// elapsed times one request.
func elapsed(send func() int) (time.Duration, int) {
	start := time.Now()
	status := send()
	return time.Since(start), status
}

// A store that stops answering costs a request StoreTimeout, not the
// client's own timeouts. The slack is generous: CI's machine is small.
func TestStoreTimeoutBoundsASilentStore(t *testing.T) {
	const budget = 50 * time.Millisecond
	store := &blockingStore{release: make(chan struct{})}
	send := limiterApp(newLimiter(Config{
		Counter: store, Limit: 100, Window: time.Minute, StoreTimeout: budget,
		BreakerFailures: 1 << 30, Logger: slog.New(slog.DiscardHandler),
	}, time.Now))

	// Before its first answer a store gets the busy allowance, for the
	// connecting done inside the first calls; the first failure ends it.
	d, status := elapsed(send)
	if status != 200 || d < busyFactor*budget || d > busyFactor*budget+time.Second {
		t.Fatalf("first call: %v, status %d; want 200 after about %v", d, status, busyFactor*budget)
	}
	for range 3 {
		d, status := elapsed(send)
		if status != 200 || d < budget || d > budget+400*time.Millisecond {
			t.Fatalf("call to a silent store: %v, status %d; want 200 after about %v", d, status, budget)
		}
	}
}

// busyStore answers every key at once except "rl:slow", which it holds for
// hold, or until the context ends.
type busyStore struct{ hold time.Duration }

func (b busyStore) Incr(ctx context.Context, key string, _ time.Duration) (int64, error) {
	if key != "rl:slow" {
		return 1, nil
	}
	select {
	case <-time.After(b.hold):
		return 1, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// A store that keeps answering others is busy, not failed: a request waits
// its turn past StoreTimeout, up to busyFactor × StoreTimeout.
func TestStoreTimeoutWaitsOnABusyStore(t *testing.T) {
	const budget = 50 * time.Millisecond
	for _, tt := range []struct {
		hold   time.Duration
		status int
		min    time.Duration
	}{
		{hold: 4 * budget, status: 200, min: 4 * budget},
		{hold: time.Hour, status: 503, min: busyFactor * budget},
	} {
		var logs syncBuffer
		l := newLimiter(Config{
			Counter: busyStore{tt.hold}, Limit: 100, Window: time.Minute, StoreTimeout: budget,
			FailClosed: true, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Tenant: func(c *fiber.Ctx) (string, bool) { return c.Get("X-Tenant"), true },
		}, time.Now)
		app := fiber.New()
		app.Use(l.handle)
		app.Get("/", func(c *fiber.Ctx) error { return nil })
		h := app.Handler()
		send := func(tenant string) int {
			var ctx fasthttp.RequestCtx
			ctx.Request.SetRequestURI("/")
			ctx.Request.Header.Set("X-Tenant", tenant)
			h(&ctx)
			return ctx.Response.StatusCode()
		}
		send("warm")

		stop := make(chan struct{})
		var others sync.WaitGroup
		others.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
					send("fast")
				}
			}
		})
		d, status := elapsed(func() int { return send("slow") })
		close(stop)
		others.Wait()
		if status != tt.status || d < tt.min || d > tt.min+time.Second {
			t.Errorf("held %v: %v, status %d; want %d after about %v", tt.hold, d, status, tt.status, tt.min)
		}
		if tt.status == 503 && !strings.Contains(strings.Join(logs.lines(), "\n"), "answered others but not this request") {
			t.Errorf("log does not say the store was busy: %q", logs.lines())
		}
	}
}

// silentListener accepts connections and never answers.
func silentListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// The deadline must reach the call whatever the client's options: go-redis
// with its defaults ignores a context's deadline on the socket and would
// wait its ReadTimeout.
func TestRedisCounterReturnsAtTheDeadline(t *testing.T) {
	addr := silentListener(t)
	for _, tt := range []struct {
		name string
		opt  redis.Options
	}{
		{"default options", redis.Options{Addr: addr}},
		{"ContextTimeoutEnabled", redis.Options{Addr: addr, ContextTimeoutEnabled: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rdb := redis.NewClient(&tt.opt)
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := NewRedisCounter(rdb).Incr(ctx, "rl:acme", time.Minute)
			if d := time.Since(start); err == nil || d > 500*time.Millisecond {
				t.Fatalf("Incr on a black hole: %v after %v; want an error after about 50ms", err, d)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rl:acme") {
				t.Errorf("error %q: want the key and context.DeadlineExceeded", err)
			}
		})
	}
}

// deadlineStore is a counter whose client enforces deadlines itself; it
// records the deadline each call came with.
type deadlineStore struct {
	mu        sync.Mutex
	deadlines []time.Duration // time left at the call; 0 for none
	entered   chan struct{}   // when set, each call says it has begun...
	release   chan struct{}   // ...and waits for this
}

func (d *deadlineStore) directCalls() int { return 1 }

func (d *deadlineStore) Incr(ctx context.Context, _ string, _ time.Duration) (int64, error) {
	var left time.Duration
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	d.mu.Lock()
	d.deadlines = append(d.deadlines, left)
	entered, release := d.entered, d.release
	d.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
		<-release
	}
	return 1, nil
}

// While the store answers, a client that enforces deadlines is called with
// one, on the request's goroutine; a store not yet heard from is watched.
func TestDeadlinesGoToAClientThatEnforcesThem(t *testing.T) {
	const budget = 50 * time.Millisecond
	store := &deadlineStore{}
	send := limiterApp(newLimiter(Config{Counter: store, Limit: 100, Window: time.Minute, StoreTimeout: budget}, time.Now))
	send()
	send()
	if len(store.deadlines) != 2 {
		t.Fatalf("%d calls, want 2", len(store.deadlines))
	}
	if store.deadlines[0] != 0 {
		t.Errorf("first call, before any answer, had a deadline %v away; want none (watched)", store.deadlines[0])
	}
	if d := store.deadlines[1]; d <= budget || d > directFactor*budget {
		t.Errorf("second call, the store answering, had a deadline %v away; want within (%v, %v]", d, budget, directFactor*budget)
	}

	// The client has one connection (directCalls 1): while a call holds
	// it, the next would queue inside the client, so it is watched.
	store.mu.Lock()
	store.entered, store.release = make(chan struct{}), make(chan struct{})
	store.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { send() })
	<-store.entered
	wg.Go(func() { send() })
	<-store.entered
	close(store.release)
	wg.Wait()
	direct, watched := store.deadlines[2], store.deadlines[3]
	if direct <= budget || watched != 0 {
		t.Errorf("two calls at once on one connection: deadlines %v and %v away; want the first within (%v, %v] and none for the second",
			direct, watched, budget, directFactor*budget)
	}
}

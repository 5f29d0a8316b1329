package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/breaker"
	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
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

// sharedTrip is the failure of one round trip that several requests
// shared, as a store reports it (see store.Store).
type sharedTrip struct {
	trip uint64
	err  error
}

func (e *sharedTrip) Error() string     { return e.err.Error() }
func (e *sharedTrip) Unwrap() error     { return e.err }
func (e *sharedTrip) RoundTrip() uint64 { return e.trip }

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

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	clock := newFakeClock()
	refused := errors.New("connection refused")
	store := &switchable{err: refused}
	logs := newLogRecorder()
	m := &Metrics{}
	app := newApp(fiberHandler(Config{
		Counter: CounterStore(store), Limit: 100, Window: time.Minute,
		BreakerFailures: 3, BreakerCooldown: time.Second, Metrics: m,
		Logger: logs.logger(),
	}, clock.Now), nil)
	send := func() int { return get(t, app, "").StatusCode }

	for i := range 3 {
		if got := send(); got != http.StatusOK {
			t.Fatalf("failure %d: status %d, want 200 (fail open)", i+1, got)
		}
	}
	if got := m.Snapshot().Breaker; got != "open" {
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
	if store.count() != 4 || m.Snapshot().Breaker != "open" {
		t.Fatalf("calls %d, breaker %v after a failed probe; want 4 and open", store.count(), m.Snapshot().Breaker)
	}
	send()
	if store.count() != 4 {
		t.Fatalf("a failed probe restarts the cool-down, but the store was called again")
	}

	store.set(nil)
	clock.Advance(time.Second)
	if got := send(); got != http.StatusOK || m.Snapshot().Breaker != "closed" {
		t.Fatalf("probe on a healthy store: status %d, breaker %v; want 200, closed", got, m.Snapshot().Breaker)
	}
	send()
	if store.count() != 6 {
		t.Fatalf("store called %d times, want 6: a closed breaker asks it again", store.count())
	}

	for _, want := range []struct {
		msg   string
		level slog.Level
		n     int
	}{
		// One a second: the first failure, and the failed probe a second
		// later. The breaker tells the outage as one story: it opened, it
		// closed; its half-open probes and their failures are no lines of
		// its own.
		{"ratelimit: counter failed, request decided by fail open", slog.LevelError, 2},
		{"ratelimit: circuit breaker open", slog.LevelError, 1},
		{"ratelimit: circuit breaker half-open", slog.LevelWarn, 0},
		{"ratelimit: circuit breaker closed", slog.LevelInfo, 1},
	} {
		lines := logs.withMsg(want.msg)
		if len(lines) != want.n {
			t.Errorf("%d lines say %q, want %d: %v", len(lines), want.msg, want.n, logs.lines())
		}
		for _, l := range lines {
			if l.level != want.level {
				t.Errorf("line %v: level %v, want %v", l, l.level, want.level)
			}
		}
	}
	if opened := logs.withMsg("ratelimit: circuit breaker open"); len(opened) == 1 {
		if n, _ := opened[0].int("failures in a row"); n != 3 || !errors.Is(opened[0].err(), refused) {
			t.Errorf("the open line does not give 3 failures in a row and the store's error: %v", opened[0])
		}
	}
	if closed := logs.withMsg("ratelimit: circuit breaker closed"); len(closed) == 1 {
		if n, _ := closed[0].int("failed probes"); n != 1 || closed[0].str("open for") != "2s" {
			t.Errorf("the closed line does not say it was open for 2s with 1 failed probe: %v", closed[0])
		}
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
	l, h := newFiberLimiter(Config{
		Counter: CounterStore(store), Limit: 100, Window: time.Minute, StoreTimeout: time.Minute,
		BreakerFailures: 1, BreakerCooldown: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	}, clock.Now)
	l.breakers.First.Failure(false, errors.New("down")) // open it
	clock.Advance(time.Second)
	app := newApp(h, nil)
	send := func() int { return get(t, app, "").StatusCode }

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
	if got := l.breakers.First.State(); got != breaker.Closed {
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
		app := newApp(fiberHandler(Config{
			Counter: CounterStore(store), Limit: 100, Window: time.Minute, FailClosed: failClosed,
			BreakerFailures: 3, BreakerCooldown: time.Second, Metrics: m,
			Logger: slog.New(slog.DiscardHandler),
		}, clock.Now), nil)
		send := func() int { return get(t, app, "").StatusCode }
		check := func(stage string, calls int, breaker string) {
			t.Helper()
			if got := send(); got != want {
				t.Errorf("FailClosed=%v, %s: status %d, want %d", failClosed, stage, got, want)
			}
			if store.count() != calls || m.Snapshot().Breaker != breaker {
				t.Fatalf("FailClosed=%v, %s: %d counter calls, breaker %v; want %d, %v",
					failClosed, stage, store.count(), m.Snapshot().Breaker, calls, breaker)
			}
		}

		check("first failure", 1, "closed")
		check("second failure", 2, "closed")
		check("third failure, which opens the breaker", 3, "open")
		for range 5 {
			check("breaker open", 3, "open")
		}
		clock.Advance(time.Second)
		check("failed probe", 4, "open")
		check("breaker open again", 4, "open")

		wantMetrics := MetricsSnapshot{FailedOpen: 10, Breaker: "open", BreakersOpen: 1}
		if failClosed {
			wantMetrics = MetricsSnapshot{FailedClosed: 10, Breaker: "open", BreakersOpen: 1}
		}
		if s := m.Snapshot(); s.FailedOpen != wantMetrics.FailedOpen || s.FailedClosed != wantMetrics.FailedClosed ||
			s.Allowed+s.Limited != 0 || s.Breaker != wantMetrics.Breaker || s.BreakersOpen != wantMetrics.BreakersOpen {
			t.Errorf("FailClosed=%v: metrics %+v, want %+v", failClosed, s, wantMetrics)
		}
	}
}

// breakerApp is an app whose limiter's breaker opens after threshold
// failures of store in a row, with its metrics in m.
func breakerApp(threshold int) (app *fiber.App, store *switchable, m *Metrics) {
	store, m = &switchable{}, &Metrics{}
	app = newApp(fiberHandler(Config{
		Counter: CounterStore(store), Limit: 100, Window: time.Minute,
		BreakerFailures: threshold, Metrics: m, Logger: slog.New(slog.DiscardHandler),
	}, newFakeClock().Now), nil)
	return app, store, m
}

// The requests that shared one failed round trip are one failure: a single
// dropped connection under load must not open the breaker.
func TestBreakerCountsARoundTripOnce(t *testing.T) {
	const threshold = 3
	app, store, m := breakerApp(threshold)
	for trip := range threshold {
		store.set(&sharedTrip{trip: uint64(trip + 1), err: errors.New("EOF")})
		for range 10 { // ten requests of one round trip
			get(t, app, "")
		}
		want := "closed"
		if trip == threshold-1 {
			want = "open"
		}
		if got := m.Snapshot().Breaker; got != want {
			t.Fatalf("after %d failed round trips of 10 requests each: breaker %v, want %v", trip+1, got, want)
		}
	}
}

// Only failures in a row open the breaker: a success in between starts the
// count again.
func TestBreakerOpensOnlyOnFailuresInARow(t *testing.T) {
	const threshold = 3
	app, store, m := breakerApp(threshold)
	send := func() int { return get(t, app, "").StatusCode }
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
	if got := m.Snapshot().Breaker; got != "closed" {
		t.Fatalf("%d failures, a success, %d failures: breaker %v, want closed", threshold-1, threshold-1, got)
	}
	if got := store.count(); got != 2*threshold-1 {
		t.Fatalf("counter called %d times, want %d: a closed breaker asks it every time", got, 2*threshold-1)
	}

	fail(1)
	if got := store.count(); got != 2*threshold {
		t.Fatalf("counter called %d times, want %d: the failure that opens the breaker still asks it", got, 2*threshold)
	}
	if got := m.Snapshot().Breaker; got != "open" {
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
	logs := newLogRecorder()
	down := errors.New("down")
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(&fakeCounter{err: down}), Limit: 100, Window: time.Minute,
		Fallback: NewMemoryCounter(), FallbackLimit: 2, Metrics: m,
		Logger: logs.logger(),
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
	if lines := logs.lines(); len(lines) != 1 || lines[0].msg != "ratelimit: counter failed, request decided by fallback" ||
		!errors.Is(lines[0].err(), down) {
		t.Errorf("log = %v, want one line saying the fallback decided, with the store's error", lines)
	}
}

func TestFailingFallbackFailsOpenOrClosed(t *testing.T) {
	broken := NewMemoryCounter()
	broken.Close()
	for _, failClosed := range []bool{false, true} {
		m := &Metrics{}
		app := newApp(RateLimitShared(Config{
			Counter: CounterStore(&fakeCounter{err: errors.New("down")}), Limit: 1, Window: time.Minute,
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

// The timing tests below run against stores that never answer. Their
// bounds: the median of several requests within 20% of what the time rule
// allows, which a store that costs twice the budget cannot meet, and
// tailSlack on the slowest, for a loaded CI machine under -race.

// silentStores never answer: a Counter of the user's own that returns when
// its context ends, and a RedisCounter on a black hole, with go-redis's
// default options (which put no deadline on the socket) and with
// ContextTimeoutEnabled (which put the context's).
var silentStores = []struct {
	name    string
	counter func(t *testing.T) store.Store
}{
	{"Counter that returns when its context ends", func(*testing.T) store.Store {
		return CounterStore(&blockingStore{release: make(chan struct{})})
	}},
	{"RedisCounter on a black hole", func(t *testing.T) store.Store {
		return silentRedis(t, redis.Options{})
	}},
	{"RedisCounter on a black hole, ContextTimeoutEnabled", func(t *testing.T) store.Store {
		return silentRedis(t, redis.Options{ContextTimeoutEnabled: true})
	}},
	// Timeouts of -2 make go-redis put no deadline on the socket at all,
	// the context's neither.
	{"RedisCounter on a black hole, ContextTimeoutEnabled, timeouts -2", func(t *testing.T) store.Store {
		return silentRedis(t, redis.Options{ContextTimeoutEnabled: true, ReadTimeout: -2, WriteTimeout: -2})
	}},
}

func silentRedis(t *testing.T, opts redis.Options) *RedisCounter {
	opts.Addr = startBlackHole(t).addr()
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { rdb.Close() })
	return NewRedisCounter(rdb)
}

// A store that stops answering costs a request StoreTimeout, whatever the
// client's options; the first request, which connects, gets the connecting
// allowance, 10 × StoreTimeout, and the first failure ends it. The errors
// say which of the two ran out.
func TestStoreTimeoutBoundsASilentStore(t *testing.T) {
	const (
		budget = 50 * time.Millisecond
		calls  = 7 // after the first
	)
	for _, s := range silentStores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			logs := newLogRecorder()
			app := newApp(RateLimitShared(Config{
				Counter: s.counter(t), Limit: 100, Window: time.Minute, StoreTimeout: budget,
				// Every call waits on the store; the last one opens the
				// breaker, whose line gives that call's error.
				BreakerFailures: 1 + calls,
				Logger:          logs.logger(),
			}), nil)
			request := func() time.Duration {
				var status int
				d := timed(func() { status = get(t, app, "acme").StatusCode })
				if status != http.StatusOK {
					t.Errorf("status %d from a silent store, want 200 (fail open)", status)
				}
				return d
			}
			late := startSchedProbe()
			first := latencies{request()}
			var later latencies
			for range calls {
				later = append(later, request())
			}
			late.halt()
			t.Logf("first request %s; the requests after it %s; %v", first, later, late)

			allowance := connectFactor * budget
			checkLatencies(t, "first request, connecting", first, late, allowance, allowance+tailSlack, allowance+tailSlack)
			checkLatencies(t, "later requests", later, late, budget, budget*6/5, budget+tailSlack)
			failed := logs.withMsg("ratelimit: counter failed")
			if len(failed) != 1 || !timerule.IsTimeout(failed[0].err()) ||
				!strings.HasPrefix(failed[0].err().Error(), "ratelimit: counter did not answer within 500ms, the 10 × StoreTimeout allowed before its first answer (") {
				t.Errorf("failure lines %v; want one, the first request's, saying it waited out the connecting allowance", failed)
			}
			opened := logs.withMsg("ratelimit: circuit breaker open")
			if len(opened) != 1 || !timerule.IsTimeout(opened[0].err()) ||
				!strings.HasPrefix(opened[0].err().Error(), "ratelimit: counter did not answer within StoreTimeout (50ms) (") {
				t.Errorf("breaker lines %v; want one, with the last request's error saying it waited out StoreTimeout", opened)
			}
		})
	}
}

// A request's own deadline ends the wait sooner, never later: a gateway
// that gives each request 5 s must not let a silent store hold a request
// 5 s, with the connecting allowance or after it, whatever the client's
// options. A request whose client went away stops waiting too.
func TestRequestContextBoundsTheWait(t *testing.T) {
	const (
		budget = 50 * time.Millisecond
		later  = 5 * time.Second
		sooner = 15 * time.Millisecond
		calls  = 5
	)
	for _, s := range silentStores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			limiter := RateLimitShared(Config{
				Counter: s.counter(t), Limit: 100, Window: time.Minute, StoreTimeout: budget,
				BreakerFailures: 1 << 30, // every request waits on the store
				Logger:          slog.New(slog.DiscardHandler),
			})
			lateApp := newApp(withDeadline(later, limiter), nil)
			measure := func(app *fiber.App, n int) latencies {
				var d latencies
				for range n {
					d = append(d, timed(func() { get(t, app, "acme") }))
				}
				return d
			}
			late := startSchedProbe()
			first := measure(lateApp, 1)
			afterDeadline := measure(lateApp, calls)
			beforeDeadline := measure(newApp(withDeadline(sooner, limiter), nil), calls)
			canceled := measure(newApp(withCancelAfter(sooner, limiter), nil), calls)
			late.halt()
			t.Logf("with a deadline %v away: the first request %s, then %s; with one %v away: %s; canceled after %v: %s; %v",
				later, first, afterDeadline, sooner, beforeDeadline, sooner, canceled, late)

			allowance := connectFactor * budget
			checkLatencies(t, fmt.Sprintf("first request, connecting, with a deadline %v away", later),
				first, late, allowance, allowance+tailSlack, allowance+tailSlack)
			checkLatencies(t, fmt.Sprintf("with a deadline %v away", later), afterDeadline, late, budget, budget*6/5, budget+tailSlack)
			// Half way between sooner and the budget: requests that waited
			// out StoreTimeout cannot pass, unless the machine is so late
			// that the bound carries as much.
			median := (sooner + budget) / 2
			checkLatencies(t, fmt.Sprintf("with a deadline %v away", sooner), beforeDeadline, late, sooner, median, sooner+tailSlack)
			checkLatencies(t, fmt.Sprintf("canceled after %v", sooner), canceled, late, sooner, median, sooner+tailSlack)
		})
	}
}

// Called directly, without a limiter, a RedisCounter returns when its
// context ends, whatever the client's options: go-redis with its defaults
// puts no deadline on the socket and would wait its ReadTimeout, 3 s.
func TestRedisCounterReturnsAtTheDeadline(t *testing.T) {
	const (
		deadline = 50 * time.Millisecond
		calls    = 5
	)
	for _, s := range silentStores[1:] {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			counter := s.counter(t).(*RedisCounter)
			var d latencies
			late := startSchedProbe()
			for range calls {
				var err error
				// The clock starts before the deadline is set, so that no
				// call can seem to return before it.
				d = append(d, timed(func() {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					_, err = counter.Incr(ctx, "rl:acme", time.Minute)
				}))
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rl:acme") {
					t.Errorf("Incr on a black hole: %v; want an error naming the key and wrapping context.DeadlineExceeded", err)
				}
			}
			late.halt()
			t.Logf("Incr with a deadline %v away: %s; %v", deadline, d, late)
			checkLatencies(t, fmt.Sprintf("Incr with a deadline %v away", deadline), d, late, deadline, deadline*6/5, deadline+tailSlack)
		})
	}
}

// twoNodes is a counter of two nodes, as a cluster's primaries are: keys
// starting "rl:a" live on node 1, the others on node 2, and node 1 fails
// while down is set.
type twoNodes struct {
	switchable
	down bool
}

var _ store.Store = (*twoNodes)(nil)

// Attach says that the store's keys live on two servers.
func (n *twoNodes) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.All, Server: func(key []byte) (int, string) { return n.nodeOf(string(key)) }}, nil
}

func (n *twoNodes) nodeOf(key string) (int, string) {
	if strings.HasPrefix(key, "rl:a") {
		return 1, "10.0.0.1:6379"
	}
	return 2, "10.0.0.2:6379"
}

func (n *twoNodes) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	if id, _ := n.nodeOf(key); id == 1 && n.down {
		return 0, errors.New("dial tcp 10.0.0.1:6379: connect: connection refused")
	}
	return n.switchable.Incr(ctx, key, window)
}

func (n *twoNodes) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	c, err := n.Incr(ctx, string(r.Key), r.Window)
	res.Allowed = c <= r.Limit
	res.Counts[0] = store.Count{N: c, Fits: res.Allowed, Left: r.Window, Length: r.Window}
	return err
}

func (n *twoNodes) Give(context.Context, *store.Request, store.Marks) error { return nil }
func (n *twoNodes) Reset(context.Context, *store.Request) error             { return nil }

// Each node of a counter has a breaker of its own: the failures of one
// node open its breaker alone, and the other node's tenants are still
// counted.
func TestBreakerPerNode(t *testing.T) {
	store, m, rec := &twoNodes{down: true}, &Metrics{}, newLogRecorder()
	app := newApp(fiberHandler(Config{
		Counter: store, Limit: 100, Window: time.Minute, BreakerFailures: 3,
		Metrics: m, Logger: rec.logger(),
	}, newFakeClock().Now), nil)
	for range 5 {
		get(t, app, "acme") // rl:acme: node 1
	}
	if s := m.Snapshot(); s.Breaker != "open" || s.BreakersOpen != 1 || s.FailedOpen != 5 {
		t.Fatalf("after 5 failures on node 1: %+v; want its breaker open, 5 failed open", s)
	}
	calls := store.count()
	for range 5 {
		if resp := get(t, app, "globex"); resp.Header.Get("X-Ratelimit-Remaining") == "" {
			t.Fatal("a tenant of node 2 was not counted while node 1's breaker was open")
		}
	}
	if s := m.Snapshot(); s.Allowed != 5 || s.BreakersOpen != 1 || store.count() != calls+5 {
		t.Fatalf("node 2's tenant: %+v after %d calls; want 5 allowed, one breaker open, 5 calls", s, store.count()-calls)
	}
	opened := rec.withMsg("ratelimit: circuit breaker open")
	if len(opened) != 1 || opened[0].str("node") != "10.0.0.1:6379" {
		t.Fatalf("breaker lines %v; want one, for node 10.0.0.1:6379", opened)
	}
}

// A request that gives up while its call is in flight, because its client
// went away or its deadline came before StoreTimeout, says nothing of the
// store: however many do, the breaker stays closed, nothing is logged,
// and Metrics count them as canceled. Requests that wait out StoreTimeout
// are still the store's failures, and open it.
func TestRequestsOwnEndIsNotTheStoresFailure(t *testing.T) {
	const (
		budget = 100 * time.Millisecond
		gone   = 10 * time.Millisecond
	)
	for _, s := range silentStores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			logs := newLogRecorder()
			m := &Metrics{}
			limiter := RateLimitShared(Config{
				Counter: s.counter(t), Limit: 100, Window: time.Minute, StoreTimeout: budget,
				BreakerFailures: 2, Logger: logs.logger(), Metrics: m,
			})
			for _, app := range []*fiber.App{newApp(withCancelAfter(gone, limiter), nil), newApp(withDeadline(gone, limiter), nil)} {
				for range 3 {
					if resp := get(t, app, "acme"); resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != "" {
						t.Fatalf("a request that gave up: status %d, remaining %q; want 200 and none (nothing counted it)",
							resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
					}
				}
			}
			snap := m.Snapshot()
			if snap.Breaker != "closed" || snap.StoreErrors.Canceled != 6 || snap.StoreErrors.Timeout != 0 || snap.StoreLatency.Count != 0 {
				t.Errorf("after 6 requests that gave up: breaker %v, %d canceled, %d timeouts, %d round trips timed; want closed, 6, 0, 0",
					snap.Breaker, snap.StoreErrors.Canceled, snap.StoreErrors.Timeout, snap.StoreLatency.Count)
			}
			if lines := logs.lines(); len(lines) != 0 {
				t.Errorf("log %v; want no line: the store did nothing wrong", lines)
			}

			plain := newApp(limiter, nil)
			get(t, plain, "acme")
			get(t, plain, "acme")
			if snap := m.Snapshot(); snap.Breaker != "open" || snap.StoreErrors.Timeout != 2 {
				t.Errorf("after 2 requests that waited out StoreTimeout: breaker %v, %d timeouts; want open, 2", snap.Breaker, snap.StoreErrors.Timeout)
			}
			if n := len(logs.withMsg("ratelimit: counter failed")); n != 1 {
				t.Errorf("%d lines about the counter's failure, want 1: %v", n, logs.lines())
			}
		})
	}
}

// A probe whose request gives up before the counter answers says nothing
// of the counter: the breaker stays open, and the next request probes at
// once, without another cool-down.
func TestAbandonedProbeLeavesTheBreakerToTheNext(t *testing.T) {
	clock := newFakeClock()
	store := &switchable{err: errors.New("connection refused")}
	m := &Metrics{}
	l := newLimiter(Options{
		Counter: CounterStore(store), Limit: 100, Window: time.Minute, BreakerFailures: 1, BreakerCooldown: time.Second,
		Logger: slog.New(slog.DiscardHandler), Metrics: m,
	}, clock.Now)
	l.Take(context.Background(), "acme") // opens it
	clock.Advance(time.Second)

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if d := l.Take(gone, "acme"); d.By != ByNone || !errors.Is(d.Err, ErrContextDone) {
		t.Fatalf("the probe's request, canceled: %+v; want ByNone with ErrContextDone", d)
	}
	if snap := m.Snapshot(); snap.Breaker != "open" || store.count() != 1 {
		t.Fatalf("after the abandoned probe: breaker %v, %d store calls; want open and 1", snap.Breaker, store.count())
	}
	store.set(nil)
	if d := l.Take(context.Background(), "acme"); d.By != ByCounter || !d.Allowed {
		t.Fatalf("the next request: %+v; want the probe, decided by the counter", d)
	}
	if snap := m.Snapshot(); snap.Breaker != "closed" {
		t.Fatalf("breaker %v after the probe succeeded, want closed", snap.Breaker)
	}
}

// A request that gives up while the fallback decides it is not the
// fallback's failure: the log has the counter's failure alone.
func TestFallbackCallThatTheRequestEndsIsNotLogged(t *testing.T) {
	rec := newLogRecorder()
	l := NewLimiter(Options{
		Counter: CounterStore(&switchable{err: errors.New("connection refused")}), Limit: 10, Window: time.Minute,
		Fallback: CounterStore(&blockingStore{release: make(chan struct{})}), Logger: rec.logger(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if d := l.Take(ctx, "acme"); d.By != ByNone || !errors.Is(d.Err, context.DeadlineExceeded) {
		t.Fatalf("Take: %+v; want decided without a counter, the fallback's wait ended by the request's deadline", d)
	}
	// The throttle lets one line a second through and counts the rest.
	if lines := rec.lines(); len(lines) != 1 || lines[0].msg != "ratelimit: counter failed, request decided by fallback" || l.failures.Suppressed.Load() != 0 {
		t.Fatalf("log %v, %d more held back; want the counter's failure alone", lines, l.failures.Suppressed.Load())
	}
}

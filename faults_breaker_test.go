package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/breaker"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
)

// The circuit breaker: failures in a row open it, one probe goes through
// after the cool-down, and each node of a counter has a breaker of its own.

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

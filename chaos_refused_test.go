package ratelimit

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/store"
)

// The chaos tests of a store that refuses connections, from the start or
// once its server dies: each request fails at once and says why.

// watchedCounter records each call the limiter makes to a RedisCounter:
// when it started, how long it took and how it ended, which the log, at a
// line a second, does not tell.
type watchedCounter struct {
	*RedisCounter
	mu    sync.Mutex
	calls []counterCall
}

type counterCall struct {
	start time.Time
	took  time.Duration
	err   error
}

var _ store.Store = (*watchedCounter)(nil)

func (w *watchedCounter) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	start := time.Now()
	err := w.RedisCounter.Take(ctx, r, res)
	w.mu.Lock()
	w.calls = append(w.calls, counterCall{start, time.Since(start), err})
	w.mu.Unlock()
	return err
}

// since returns the calls that started at from or later.
func (w *watchedCounter) since(from time.Time) []counterCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []counterCall
	for _, c := range w.calls {
		if !c.start.Before(from) {
			out = append(out, c)
		}
	}
	return out
}

// TestChaosRefused points the limiter at a store that refuses connections:
// a port nothing listens on, from the start, and a server that dies under a
// running gateway. Requests must fail at once, well under StoreTimeout, and
// say why: the refused connection, not a timeout. Every request asks the
// counter (no breaker), so that each one shows what a failure costs.
func TestChaosRefused(t *testing.T) {
	const storeTimeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		client func(a, b string) redis.UniversalClient
	}{
		{"nothing listens/client", func(a, _ string) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: a})
		}},
		{"nothing listens/cluster", func(a, b string) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{a, b}})
		}},
		{"nothing listens/ring", func(a, b string) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a, "b": b}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const requests = 10
			rdb := tc.client(redistest.ClosedAddr(t), redistest.ClosedAddr(t))
			t.Cleanup(func() { rdb.Close() })
			logs := newLogRecorder()
			app := newApp(RateLimitShared(Config{
				Counter: NewRedisCounter(rdb), Limit: 100, Window: time.Minute,
				StoreTimeout: storeTimeout, BreakerFailures: 1 << 30, Logger: logs.logger(),
			}), nil)
			var d latencies
			late := startSchedProbe()
			for range requests {
				var status int
				d = append(d, timed(func() { status = get(t, app, "acme").StatusCode }))
				if status != fiber.StatusOK {
					t.Errorf("status %d, want 200 (fail open)", status)
				}
			}
			late.halt()
			t.Logf("requests: %s", d)
			checkLatencies(t, "requests to a refused port", d, late, 0, storeTimeout/4, storeTimeout+tailSlack)
			failed := logs.withMsg("ratelimit: counter failed")
			if len(failed) == 0 || !errors.Is(failed[0].err(), syscall.ECONNREFUSED) || timerule.IsTimeout(failed[0].err()) {
				t.Errorf("failure lines %v; want the first to give the refused connection as the error", failed)
			}
		})
	}
	t.Run("the server dies", func(t *testing.T) { testChaosServerDies(t, storeTimeout) })
}

func testChaosServerDies(t *testing.T, storeTimeout time.Duration) {
	const (
		callers = 8
		after   = 700 * time.Millisecond
		// The calls in flight when the server died fail on their broken
		// connections; those that start this long after find none left.
		settle = 50 * time.Millisecond
	)
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	m := &Metrics{}
	logs := newLogRecorder()
	counter := &watchedCounter{RedisCounter: NewRedisCounter(rdb)}
	h := chaosApp(Config{
		Counter: counter, Limit: 1000, Window: time.Second, StoreTimeout: storeTimeout,
		BreakerFailures: 1 << 30, DisableOverLimitCache: true, Logger: logs.logger(), Metrics: m,
	}, 0)
	load := startChaosLoad(h, callers, chaosTenants(t, 4), time.Millisecond)
	load.awaitRedis(t, m, "before the server died")

	srv.Stop()
	killed := load.since()
	time.Sleep(after)
	samples := load.finish(t, 5*time.Second)

	var d latencies
	for _, s := range samples {
		if s.start >= killed+settle {
			d = append(d, s.end-s.start)
		}
	}
	calls := counter.since(load.t0.Add(killed + settle))
	var refused, timedOut int
	var other []error
	for _, c := range calls {
		switch {
		case errors.Is(c.err, syscall.ECONNREFUSED):
			refused++
		case timerule.IsTimeout(c.err):
			timedOut++
		default:
			other = append(other, c.err)
		}
	}
	t.Logf("after the server died: requests %s; of %d counter calls %d were refused, %d timed out, %d failed otherwise",
		d, len(calls), refused, timedOut, len(other))
	if len(other) > 0 {
		t.Logf("the first other failure: %v", other[0])
	}
	if len(d) == 0 {
		t.Fatal("no request started after the server died")
	}
	checkLatencies(t, "requests after the server died", d, load.probe, 0, storeTimeout/4, storeTimeout+tailSlack)
	// go-redis dials on a goroutine of its own, retrying 100 ms apart
	// (DialerRetryTimeout): a call that waits on a dial in progress learns
	// of the refusal from the next attempt, up to 100 ms later, which may
	// be past StoreTimeout. That is rare; a limiter that waited out
	// StoreTimeout on refusals times out on all.
	if timedOut > len(calls)/20 || refused == 0 {
		t.Errorf("after the server died %d counter calls timed out and %d were refused; want all refused but a few", timedOut, refused)
	}
	// Only the calls in flight at the death may fail otherwise (EOF, a
	// reset connection); they ended before settle.
	if len(other) > 0 {
		t.Errorf("%d counter calls that started %v after the death failed neither refused nor timed out, e.g. %v", len(other), settle, other[0])
	}
	// A line reports a timeout only where a call really timed out: one in
	// flight at the death, or one that waited on a dial in progress
	// (above), which a busy machine makes more likely while the calls
	// before settle still run. (The log's one line a second is the first
	// failure's: within this run, a call's in flight at the death.)
	var timeouts int
	var timeoutLine logLine
	for _, l := range logs.lines() {
		if timerule.IsTimeout(l.err()) {
			timeouts++
			timeoutLine = l
		}
	}
	timedOutAll := 0
	for _, c := range counter.since(load.t0) {
		if timerule.IsTimeout(c.err) {
			timedOutAll++
		}
	}
	if timeouts > timedOutAll {
		t.Errorf("%d lines report a timeout, but %d counter calls timed out: a refused connection reported as a timeout, e.g. %v",
			timeouts, timedOutAll, timeoutLine)
	}
	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
}

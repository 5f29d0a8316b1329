package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

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

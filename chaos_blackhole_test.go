package ratelimit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The chaos test of a listener that accepts connections and never answers:
// the connecting allowance and StoreTimeout bound each request's wait.

// TestChaosBlackHole points the limiter at a listener that accepts
// connections and never answers, from the start, with a request deadline of
// 5 s: requests made before the first failure wait the connecting
// allowance, every later one StoreTimeout, whatever the client's options.
// With ContextTimeoutEnabled and a request deadline, a silent store once
// held each request until the request's deadline.
func TestChaosBlackHole(t *testing.T) {
	for _, tc := range []struct {
		name            string
		contextTimeouts bool
		// breaker is false for a breaker that never opens: every request
		// then waits on the store. With it, only its probes do, and p99
		// is the breaker's instant answers.
		breaker bool
	}{
		{"default options", false, false},
		{"ContextTimeoutEnabled", true, false},
		{"ContextTimeoutEnabled, with the breaker", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testChaosBlackHole(t, tc.contextTimeouts, tc.breaker) })
	}
}

func testChaosBlackHole(t *testing.T, contextTimeouts, breaker bool) {
	skipIfShort(t) // needs no server, but takes a second
	const (
		callers      = 16
		storeTimeout = 50 * time.Millisecond
		cooldown     = 100 * time.Millisecond
		// The connecting allowance, 500 ms, and as long again after it.
		duration = 2 * connectFactor * storeTimeout
	)
	hole := startBlackHole(t)
	rdb := redis.NewClient(&redis.Options{Addr: hole.addr(), ContextTimeoutEnabled: contextTimeouts})
	t.Cleanup(func() { rdb.Close() })

	logs := newLogRecorder()
	m := &Metrics{}
	cfg := Config{
		Counter:         NewRedisCounter(rdb),
		Limit:           1000,
		Window:          time.Second,
		Logger:          logs.logger(),
		Metrics:         m,
		StoreTimeout:    storeTimeout,
		BreakerCooldown: cooldown,
	}
	if !breaker {
		cfg.BreakerFailures = 1 << 30
	}
	load := startChaosLoad(chaosApp(cfg, requestDeadline), callers, chaosTenants(t, 4), time.Millisecond)
	time.Sleep(duration)
	samples := load.finish(t, 5*time.Second)

	snap := m.Snapshot()
	lc := countChaosLogs(logs.lines())
	logChaosFigures(t, load, samples, snap, lc)

	// Nothing ever answers, so every request failed; the first to end is
	// the store's first failure. Requests that started before it were
	// connecting.
	cold, warm := splitAtFirstEnd(samples)
	// With the breaker, a request the open breaker answered at once, which
	// the scheduler then ran late, looks like one that waited: one such
	// took 29 ms under -race on a loaded machine, as the scheduler
	// overslept by 25 ms. Below half the wait plus the scheduler's worst
	// lateness, such a request is taken for an instant answer; but that
	// line stays below StoreTimeout, which a probe waits at least (CI
	// once ran a nap 66 ms late, and took its probes of 51 ms for
	// instant answers). An instant answer taken for a wait is within the
	// waits' bounds all the same.
	instant := storeTimeout / 2
	if breaker {
		instant += min(load.probe.max(), storeTimeout/4)
	}
	var waited latencies // warm requests that waited on the store
	for _, d := range warm {
		if d >= instant {
			waited = append(waited, d)
		}
	}
	t.Logf("connecting: %s; after the first failure: %s; of which waited on the store: %s",
		cold, warm, waited)

	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
	if n := uint64(len(samples)); snap.FailedOpen != n {
		t.Errorf("%d of %d requests failed open, want all: nothing answers", snap.FailedOpen, n)
	}
	if len(cold) == 0 || len(warm) == 0 {
		t.Fatalf("requests while connecting: %d, later ones: %d; want some of each", len(cold), len(warm))
	}
	allowance := connectFactor * storeTimeout
	checkLatencies(t, "requests while connecting", cold, load.probe, allowance, allowance*6/5, allowance+tailSlack)
	// Each wait on the store lasts StoreTimeout at least: the cases without
	// the breaker hold that of every request. With it, a request counted
	// here may be an instant answer that the scheduler ran later than its
	// probe saw (one took 39 ms under -race beside two busy processes, its
	// probe at most 7 ms late), so only the median and the tail are held.
	lo := storeTimeout
	if breaker {
		lo = instant
	}
	checkLatencies(t, "requests that waited on the store after the first failure", waited, load.probe, lo, storeTimeout*6/5, storeTimeout+tailSlack)
	if !breaker {
		if lc.open != 0 || len(waited) != len(warm) {
			t.Errorf("with no breaker, %d open lines and %d of %d requests after the first failure waited on the store; want 0 and all",
				lc.open, len(waited), len(warm))
		}
		return
	}
	// The bound of the issue that brought the breaker: p99 within
	// StoreTimeout + 20 ms, as the breaker answers most requests at once.
	if got, bound := warm.percentile(99), storeTimeout+20*time.Millisecond+load.probe.max(); got > bound {
		t.Errorf("p99 latency after the first failure = %v, want at most %v (%v)", got, bound, load.probe)
	}
	if lc.open == 0 {
		t.Error("the breaker never opened")
	}
	if len(waited) == 0 {
		t.Error("no request after the first failure waited on the store: no probe went through")
	}
}

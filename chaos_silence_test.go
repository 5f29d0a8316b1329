package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The chaos test that stops the server (SIGSTOP) under load: requests are
// decided within StoreTimeout meanwhile, and by Redis again once it resumes.

// TestChaosSilence stops the server (SIGSTOP) under load, after Redis has
// answered, with a request deadline of 5 s: the server keeps its port and
// its connections and answers nothing. Every request meanwhile must be
// decided without it within StoreTimeout, whatever the client's options,
// and Redis must decide again as soon as the server resumes (SIGCONT). The
// calls that timed out may have counted, once the server read them; none
// may have counted twice.
func TestChaosSilence(t *testing.T) {
	for _, tc := range []struct {
		name            string
		contextTimeouts bool
	}{
		{"default options", false},
		{"ContextTimeoutEnabled", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testChaosSilence(t, tc.contextTimeouts) })
	}
}

func testChaosSilence(t *testing.T, contextTimeouts bool) {
	const (
		callers      = 16
		storeTimeout = 100 * time.Millisecond
		silence      = 800 * time.Millisecond
		resumeBound  = time.Second
	)
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: contextTimeouts})
	t.Cleanup(func() { rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })

	logs := newLogRecorder()
	m := &Metrics{}
	counter := &callCountingCounter{RedisCounter: NewRedisCounter(rdb)}
	ids := chaosTenants(t, 4)
	h := chaosApp(Config{
		Counter:               counter,
		Limit:                 1 << 30,
		Window:                10 * time.Second, // outlasts the test: the keys hold every count
		Logger:                logs.logger(),
		Metrics:               m,
		StoreTimeout:          storeTimeout,
		BreakerFailures:       1 << 30, // every request waits on the store
		DisableOverLimitCache: true,
	}, requestDeadline)
	created := time.Now()
	load := startChaosLoad(h, callers, ids, time.Millisecond)
	load.awaitRedis(t, m, "before the silence")

	resume, err := pauseProcess(srv.Pid())
	if err != nil {
		load.finish(t, 5*time.Second)
		t.Skipf("cannot stop redis-server: %v", err)
	}
	t.Cleanup(resume) // before the server's own cleanup, which runs later
	// The silence is read inside the signals, so that no request the
	// server answered counts as within it.
	stopped := load.since()
	time.Sleep(silence)
	resumed := load.since()
	resume()
	before := m.Snapshot()
	var back time.Duration
	backErr := poll(resumeBound, func() error {
		if s := m.Snapshot(); s.Allowed+s.Limited <= before.Allowed+before.Limited {
			return fmt.Errorf("Redis decided no request since the server resumed")
		}
		back = load.since() - resumed
		return nil
	})
	time.Sleep(100 * time.Millisecond) // a little Redis after the silence
	samples := load.finish(t, 5*time.Second)
	lifetime := time.Since(created)

	snap := m.Snapshot()
	lc := countChaosLogs(logs.lines())
	logChaosFigures(t, load, samples, snap, lc)

	// Requests that began and ended within the silence waited on the store
	// for all of their budget; those that overlapped it, for part.
	var within, overlapping latencies
	for _, s := range samples {
		if s.start >= stopped && s.end <= resumed {
			within = append(within, s.end-s.start)
		}
		if s.start < resumed && s.end > stopped {
			overlapping = append(overlapping, s.end-s.start)
		}
	}
	t.Logf("silence of %v: requests within it %s; overlapping it %s; Redis decided again %v after the server resumed",
		(resumed - stopped).Round(time.Millisecond), within, overlapping, back.Round(time.Millisecond))

	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
	if len(within) == 0 {
		t.Fatal("no request began and ended within the silence")
	}
	checkLatencies(t, "requests within the silence", within, load.probe, storeTimeout, storeTimeout*6/5, storeTimeout+tailSlack)
	checkLatencies(t, "requests overlapping the silence", overlapping, load.probe, 0, storeTimeout*6/5, storeTimeout+tailSlack)
	if backErr != nil {
		t.Errorf("after the silence: %v", backErr)
	}
	checkChaosStatuses(t, samples, snap)
	checkChaosFailureLog(t, lc, lifetime)

	// The server may run a script call whose caller gave up, once it reads
	// it; it never runs one twice.
	sent := make([]uint64, len(ids))
	for _, s := range samples {
		sent[s.tenant]++
	}
	calls := counter.snapshot()
	for i, id := range ids {
		key := "rl:" + id
		n, err := admin.Get(context.Background(), key).Uint64()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		if c := calls[key]; n < c.answered || n > c.made || n > sent[i] {
			t.Errorf("Redis counted %d on %s; want between the %d calls that got a count back and the %d calls made (%d requests sent)",
				n, key, c.answered, c.made, sent[i])
		}
	}
}

package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/logline"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// The budget tests kill the server that a limiter's tenants live on, on
// each kind of client, and put in its place, on its port, a process that
// accepts connections and never answers (a black hole): the client then
// dials it at once, and waits on whatever go-redis waits on (its
// handshake, its pool, a Sentinel's lookups, which name the dead primary
// until the Sentinel fails over). The limiter's log and go-redis's lines
// (RedisLogger) go to a handler that never returns, as standard error does
// into a pipe that nobody reads on a loaded machine. Every Take must still
// return within its budget: StoreTimeout, or ConnectFactor × that before
// the store's first answer.
//
// A log handler that blocked held the request that had a line to write
// for as long as it blocked (the failure line, the breaker's), and held
// go-redis's goroutine inside the failover client's lock, so that it never
// dialled again: a Sentinel run on a loaded machine saw a Take of 1 m 28 s,
// and its tenants uncounted for 1 m 33 s after the kill.

// budgetAfterKill is how long the load runs after the kill: long enough
// for the first answers' timeouts, the handshakes that the black hole
// leaves unanswered, and the round trips that queue behind them.
const budgetAfterKill = 1500 * time.Millisecond

// budgetSubject is a client of servers of the test's own, the tenants the
// load sends, and the server to kill.
type budgetSubject struct {
	rdb      redis.UniversalClient
	tenants  []string
	victim   *redistest.Server
	sentinel bool // a Sentinel fails over: the tenants must be counted again
}

type budgetOptions struct {
	name           string
	contextTimeout bool
	poolSize       int // 0: go-redis's default
}

func TestNoTakeWaitsPastItsBudget(t *testing.T) {
	options := []budgetOptions{{"default options", false, 0}, {"ContextTimeoutEnabled", true, 0}}
	// A pool of 2 is full of connections stuck on the black hole as soon
	// as two round trips wait there: the others wait for the pool.
	full := []budgetOptions{
		{"default options, a pool of 2 stuck connections", false, 2},
		{"ContextTimeoutEnabled, a pool of 2 stuck connections", true, 2},
	}
	for _, c := range []struct {
		name    string
		options []budgetOptions
		start   func(t *testing.T, o budgetOptions) budgetSubject
	}{
		{"single node", append(options, full...), budgetSingleNode},
		{"cluster", options, budgetCluster},
		{"ring", options, budgetRing},
		{"Sentinel", options, budgetSentinel},
	} {
		for _, o := range c.options {
			t.Run(c.name+"/"+o.name, func(t *testing.T) { testNoTakeWaitsPastItsBudget(t, c.start(t, o)) })
		}
	}
}

func budgetSingleNode(t *testing.T, o budgetOptions) budgetSubject {
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: o.contextTimeout, PoolSize: o.poolSize})
	t.Cleanup(func() { rdb.Close() })
	return budgetSubject{rdb: rdb, tenants: chaosTenants(t, 6), victim: srv}
}

func budgetCluster(t *testing.T, o budgetOptions) budgetSubject {
	cluster := redistest.StartOwnCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: o.contextTimeout, PoolSize: o.poolSize})
	t.Cleanup(func() { rdb.Close() })
	victim := cluster.Primaries[0]
	tenants, _ := failoverTenantsBy(t, clusterNodeOf(rdb), victim.Addr(), len(cluster.Primaries))
	return budgetSubject{rdb: rdb, tenants: tenants, victim: victim}
}

func budgetRing(t *testing.T, o budgetOptions) budgetSubject {
	shards, addrs := startRingShards(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: o.contextTimeout, PoolSize: o.poolSize})
	t.Cleanup(func() { ring.Close() })
	tenants, _ := failoverTenantsBy(t, ringNodeOf(ring), shards[0].Addr(), len(shards))
	return budgetSubject{rdb: ring, tenants: tenants, victim: shards[0]}
}

func budgetSentinel(t *testing.T, o budgetOptions) budgetSubject {
	s := redistest.StartSentinel(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: []string{s.Addr},
		ContextTimeoutEnabled: o.contextTimeout, PoolSize: o.poolSize,
	})
	t.Cleanup(func() { rdb.Close() })
	return budgetSubject{rdb: rdb, tenants: chaosTenants(t, 6), victim: s.Primary, sentinel: true}
}

// stuckHandler is a slog handler that never returns until the test ends:
// standard error into a pipe that nobody reads.
type stuckHandler struct {
	release chan struct{}
	lines   atomic.Int64 // the lines it was handed
}

func (h *stuckHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *stuckHandler) Handle(context.Context, slog.Record) error {
	h.lines.Add(1)
	<-h.release
	return nil
}

func (h *stuckHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *stuckHandler) WithGroup(string) slog.Handler      { return h }

// budgetSample is one Take: when it started and ended, since the load
// started, and whether the store counted it.
type budgetSample struct {
	tenant     int
	start, end time.Duration
	counted    bool
}

func testNoTakeWaitsPastItsBudget(t *testing.T, s budgetSubject) {
	sink := &stuckHandler{release: make(chan struct{})}
	logger := slog.New(sink)
	redis.SetLogger(RedisLogger(logger))
	t.Cleanup(func() {
		redistest.Quiet() // go-redis's own logger off again
		logline.GoRedis.Store(nil)
	})
	// Registered last, so run first: the lines the sink holds are let go
	// before the clients close.
	t.Cleanup(func() { close(sink.release) })

	m := &Metrics{}
	lim := NewLimiter(Options{
		Counter: NewRedisCounter(s.rdb), Limit: 1 << 30, Window: time.Minute,
		Logger: logger, Metrics: m,
		// A breaker that never opens: every request waits on the store.
		BreakerFailures: 1 << 30,
	})
	timeout := lim.opts.StoreTimeout

	var (
		mu      sync.Mutex
		samples []budgetSample
		inTake  = map[int]time.Duration{} // caller: when its Take in progress started
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		t0      = time.Now()
		late    = startSchedProbe() // the scheduler's lateness, which every latency includes
	)
	defer late.halt()
	since := func() time.Duration { return time.Since(t0) }
	const callers = 8
	for c := range callers {
		wg.Go(func() {
			for i := c % len(s.tenants); ; i = (i + callers) % len(s.tenants) {
				select {
				case <-stop:
					return
				default:
				}
				// Half the callers have no deadline of their own (a
				// client with ContextTimeoutEnabled then makes a lone
				// round trip on the caller's goroutine), half one of 5 s.
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if c%2 == 1 {
					ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				}
				start := since()
				mu.Lock()
				inTake[c] = start
				mu.Unlock()
				d := lim.Take(ctx, s.tenants[i])
				cancel()
				end := since()
				mu.Lock()
				delete(inTake, c)
				samples = append(samples, budgetSample{i, start, end, d.By == ByCounter})
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	// counted reports whether every tenant was counted by a Take that
	// started after from.
	counted := func(from time.Duration) bool {
		mu.Lock()
		defer mu.Unlock()
		seen := map[int]bool{}
		for _, x := range samples {
			if x.counted && x.start >= from {
				seen[x.tenant] = true
			}
		}
		return len(seen) == len(s.tenants)
	}
	waitCounted := func(from, within time.Duration) bool {
		for deadline := time.Now().Add(within); !counted(from); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return false
			}
		}
		return true
	}

	warm := waitCounted(0, 10*time.Second)
	var kill time.Duration
	recovered := true
	if warm {
		kill = since()
		addr := s.victim.Addr()
		s.victim.Stop()
		startBlackHoleOn(t, addr)
		time.Sleep(budgetAfterKill)
		if s.sentinel {
			recovered = waitCounted(kill, failoverRecovery)
		}
	}
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		mu.Lock()
		var held latencies
		for _, start := range inTake {
			held = append(held, since()-start)
		}
		mu.Unlock()
		t.Fatalf("%d Takes still waiting 3 s after the load stopped, for %s; %d log lines were handed to the stuck handler",
			len(held), held, sink.lines.Load())
	}

	var before, after latencies
	for _, x := range samples {
		if x.start < kill {
			before = append(before, x.end-x.start)
		} else {
			after = append(after, x.end-x.start)
		}
	}
	late.halt()
	snap := m.Snapshot()
	t.Logf("Takes before the kill %s; after it %s; %v; store errors %+v; %d log lines handed to the stuck handler",
		before, after, late, snap.StoreErrors, sink.lines.Load())
	if !warm {
		t.Fatal("not every tenant was counted before the kill")
	}

	// A Take that started before the store's first answer or failure may
	// wait the connecting allowance; every later one StoreTimeout. Each may
	// also wait for its log line while the handler is stuck (at most once
	// a stuck spell, logline.StuckAfter), and as late as the scheduler ran
	// it: the most it ran one nap late, or the lateness of all the naps
	// that overlapped the Take, when it met several stalls (two CPU hogs
	// beside the suite once stalled the process 824 ms, and a Take that
	// met that and more waited 1.39 s).
	firstEnd := time.Duration(1<<63 - 1)
	for _, x := range samples {
		firstEnd = min(firstEnd, x.end)
	}
	slack := logline.StuckAfter + tailSlack
	var over []string
	for _, x := range samples {
		budget := timeout
		if x.start < firstEnd {
			budget = connectFactor * timeout
		}
		lateness := late.lateness(t0.Add(x.start), t0.Add(x.end))
		if d := x.end - x.start; d > budget+slack+lateness {
			over = append(over, fmt.Sprintf("%v (started %v after the kill, budget %v, the scheduler late by %v meanwhile)",
				d.Round(time.Millisecond), (x.start-kill).Round(time.Millisecond), budget, lateness.Round(time.Millisecond)))
		}
	}
	if len(over) > 0 {
		t.Errorf("%d Takes waited past their budget, %v of slack and the scheduler's lateness: %v", len(over), slack, over)
	}
	if snap.StoreErrors.Timeout == 0 {
		t.Error("no round trip timed out: the load never met the black hole")
	}
	if snap.StoreErrors.Configuration != 0 || snap.StoreErrors.Canceled != 0 {
		t.Errorf("store errors %+v; want no misconfiguration (a server that never answers is not one) and no request's own context ending (5 s, or none)",
			snap.StoreErrors)
	}
	if !recovered {
		t.Errorf("not every tenant counted again within %v of the kill, after the Sentinel failed over", failoverRecovery)
	}
}

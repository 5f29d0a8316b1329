package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/gatewaykit/ratelimit/internal/logline"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/store"
)

// The chaos tests break the store under load: they kill its connections,
// kill the server and start it again on the same port, stop it (SIGSTOP),
// point the limiter at a port nothing listens on or at a listener that
// never answers. What they check is what a gateway's operator sees: every
// request answered, and soon; no tenant counted for more requests than it
// sent; the breaker and the fallback taking over; a log that names the
// cause and stays readable.
//
// Timing bounds: the median of the requests that waited on the store at
// most 1.2 × StoreTimeout, which a store that costs twice the budget cannot
// meet, and a quarter of StoreTimeout where the store fails at once;
// tailSlack on the tail (p99, max) only. Requests made before
// the counter first answered or failed may wait the connecting allowance,
// 10 × StoreTimeout, and are bounded apart.
//
// The runs are short (1 to 2 s each) so that the whole package stays well
// under a minute under -race on a 2-core machine.

// requestDeadline is the deadline a gateway's timeout middleware gives each
// request in the tests that have one: far longer than StoreTimeout, which
// must still bound the wait.
const requestDeadline = 5 * time.Second

// TestChaosConnectionKills runs callers through a RedisCounter while the
// test kills every connection of the counter's client on every server every
// 30 ms, with the client's MaxRetries at 10, so that a script call that
// go-redis sent again after a lost reply would count its requests twice.
// No tenant's count in Redis may exceed the requests it sent, nor the calls
// made for it.
func TestChaosConnectionKills(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T, name string) (redis.UniversalClient, []*redis.Client)
	}{
		{"single node", chaosSingleNode},
		{"cluster", chaosCluster},
		{"ring", chaosRing},
	} {
		t.Run(tc.name, func(t *testing.T) { testChaosConnectionKills(t, tc.client) })
	}
}

// The clients of the connection-kill test: a client named name, that
// retries 10 times, and one client of each of its servers, to kill with.
// Kills go only to connections named name, so that the shared servers'
// other clients are left alone.

func chaosSingleNode(t *testing.T, name string) (redis.UniversalClient, []*redis.Client) {
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 10, ClientName: name})
	t.Cleanup(func() { rdb.Close() })
	return rdb, chaosKillers(t, nil, srv.Addr())
}

func chaosCluster(t *testing.T, name string) (redis.UniversalClient, []*redis.Client) {
	addrs := clusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: 10, ClientName: name})
	t.Cleanup(func() { rdb.Close() })
	return rdb, chaosKillers(t, nil, addrs...)
}

func chaosRing(t *testing.T, name string) (redis.UniversalClient, []*redis.Client) {
	// The shards of newRingClient, with the options of this test.
	ropt := ringOptions(t)
	ropt.MaxRetries, ropt.ClientName = 10, name
	ring := redis.NewRing(ropt)
	t.Cleanup(func() { ring.Close() })
	addrs := []string{ropt.Addrs["a"]}
	if ropt.Addrs["b"] != ropt.Addrs["a"] {
		addrs = append(addrs, ropt.Addrs["b"])
	}
	return ring, chaosKillers(t, redisOptions(t), addrs...)
}

// tenantsOfOneShard returns n tenants whose keys the ring keeps on one
// shard.
func tenantsOfOneShard(t *testing.T, ring *redis.Ring, n int) []string {
	var ids []string
	var shard *redis.Client
	for range 100 * n {
		id := uniqueTenant(t)
		c, err := ring.GetShardClientForKey("rl:" + id)
		if err != nil {
			t.Fatal(err)
		}
		if shard == nil {
			shard = c
		}
		if c == shard {
			ids = append(ids, id)
		}
		if len(ids) == n {
			return ids
		}
	}
	t.Fatalf("found %d tenants of one shard in %d tries, want %d", len(ids), 100*n, n)
	return nil
}

// chaosKillers returns a client of each of addrs, with opt's credentials
// when opt is not nil, closed when the test ends.
func chaosKillers(t *testing.T, opt *redis.Options, addrs ...string) []*redis.Client {
	var killers []*redis.Client
	for _, addr := range addrs {
		o := &redis.Options{Addr: addr}
		if opt != nil {
			o.Username, o.Password, o.TLSConfig = opt.Username, opt.Password, opt.TLSConfig
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		killers = append(killers, c)
	}
	return killers
}

// killConnections closes every connection named name on node, and returns
// how many it closed.
func killConnections(ctx context.Context, node *redis.Client, name string) (int64, error) {
	list, err := node.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	pipe := node.Pipeline()
	var kills []*redis.IntCmd
	for _, line := range strings.Split(list, "\n") {
		var id string
		named := false
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "id="); ok {
				id = v
			}
			if field == "name="+name {
				named = true
			}
		}
		if named && id != "" {
			kills = append(kills, pipe.ClientKillByFilter(ctx, "ID", id))
		}
	}
	if len(kills) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	var n int64
	for _, k := range kills {
		n += k.Val()
	}
	return n, nil
}

func testChaosConnectionKills(t *testing.T, client func(t *testing.T, name string) (redis.UniversalClient, []*redis.Client)) {
	const (
		callers  = 32
		tenants  = 8
		duration = 1500 * time.Millisecond
		every    = 30 * time.Millisecond
	)
	name := "ratelimit-chaos-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rdb, killers := client(t, name)
	ids := chaosTenants(t, tenants)
	if ring, ok := rdb.(*redis.Ring); ok {
		// go-redis sends a Ring's pipeline once, whatever MaxRetries, but
		// may send a single command again. Tenants of one shard make
		// every round trip one script call, which a client that ignored
		// NoRetry would send again.
		ids = tenantsOfOneShard(t, ring, tenants)
	}

	logs := newLogRecorder()
	m := &Metrics{}
	counter := &callCountingCounter{RedisCounter: NewRedisCounter(rdb)}
	h := chaosApp(Config{
		Counter: counter,
		Limit:   100,
		// Longer than the test, so that each key holds every increment of
		// the test when it is read.
		Window:  10 * time.Second,
		Logger:  logs.logger(),
		Metrics: m,
		// Every request asks Redis, so that Redis counts all it decided.
		DisableOverLimitCache: true,
		// Each kill fails every call in flight at once, which opens the
		// breaker; a short cool-down sends requests back to Redis soon,
		// so that most kills land on calls in flight.
		BreakerCooldown: 50 * time.Millisecond,
	}, 0)
	created := time.Now()

	// Each caller pauses 1 ms between requests. Without the pause the
	// callers looping on the breaker's instant answers saturate both
	// cores under -race, and the figures measure Go's scheduler.
	load := startChaosLoad(h, callers, ids, time.Millisecond)
	// The kills start once every caller has had its first answer, so that
	// the connecting is measured on its own. A kill in the middle of a
	// connection's handshake makes go-redis try the handshake again after
	// a backoff (with MaxRetries at 10, for up to seconds), and the first
	// requests would then wait out the connecting allowance. Later kills
	// still land in the handshakes of the connections dialled again.
	load.awaitFirstAnswers(t, 5*time.Second)
	var kills, killErrs int64
	ticker := time.NewTicker(every)
	stop := time.After(duration)
kill:
	for {
		select {
		case <-ticker.C:
			for _, k := range killers {
				n, err := killConnections(context.Background(), k, name)
				if err != nil {
					killErrs++
				}
				kills += n
			}
		case <-stop:
			break kill
		}
	}
	ticker.Stop()
	samples := load.finish(t, 5*time.Second)
	lifetime := time.Since(created)

	snap := m.Snapshot()
	lc := countChaosLogs(logs.lines())
	t.Logf("%d rounds of kills closed %d connections (%d kills failed)", int(duration/every), kills, killErrs)
	logChaosFigures(t, load, samples, snap, lc)

	// The window outlasts the test, so each key holds every request that
	// Redis allowed on it. A call whose reply a kill cut off may have
	// counted (its request then failed open), but no call may count twice,
	// as one that go-redis sent again after a lost reply would. So each
	// key's count lies between the calls that got an allowed answer back
	// and the calls made, which are at most the requests the tenant sent.
	sent := make([]uint64, len(ids))
	for _, s := range samples {
		sent[s.tenant]++
	}
	calls := counter.snapshot()
	var counted, made, answered, allowed uint64
	for i, id := range ids {
		key := "rl:" + id
		n, err := rdb.Get(context.Background(), key).Uint64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s: %v", key, err)
		}
		c := calls[key]
		counted, made, answered = counted+n, made+c.made, answered+c.answered
		if n > sent[i] {
			t.Errorf("Redis counted %d requests of tenant %s, which sent %d", n, id, sent[i])
		}
		if n < c.allowed || n > c.made {
			t.Errorf("Redis counted %d on %s; want between the %d calls that were allowed and the %d calls made",
				n, key, c.allowed, c.made)
		}
		allowed += c.allowed
	}
	t.Logf("Redis counted %d requests; the counter was called %d times: %d answered (%d allowed), %d failed, of which %d counted",
		counted, made, answered, allowed, made-answered, counted-min(counted, allowed))
	if answered != snap.Allowed+snap.Limited {
		t.Errorf("%d counter calls got a count back, but Redis decided %d requests", answered, snap.Allowed+snap.Limited)
	}
	requireEveryKeyExpires(t, rdb)

	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
	if kills == 0 {
		t.Fatal("the kills closed no connection: the test broke nothing")
	}
	if snap.Allowed+snap.Limited == 0 {
		t.Fatal("Redis decided no request: the test saw only the breaker's answers")
	}
	if snap.FailedOpen == 0 {
		t.Error("no request failed open: the kills failed no call, so the test broke nothing")
	}
	checkChaosStatuses(t, samples, snap)
	checkChaosFailureLog(t, lc, lifetime)
	// While connections are dialled again a request waits at most
	// StoreTimeout; before the first answer, the connecting allowance.
	cold, warm := splitAtFirstEnd(samples)
	checkLatencies(t, "before the first answer", cold, load.probe, 0, defaultStoreTimeout*6/5, connectFactor*defaultStoreTimeout+tailSlack)
	checkLatencies(t, "after the first answer", warm, load.probe, 0, defaultStoreTimeout*6/5, defaultStoreTimeout+tailSlack)
}

// callCountingCounter counts, per key, the takes made of a RedisCounter,
// those that got an answer and those that were allowed. It is the
// RedisCounter but for Take, so that the limiter calls Redis as it would
// without it: a store in front of a store.
type callCountingCounter struct {
	*RedisCounter
	mu    sync.Mutex
	calls map[string]keyCalls
}

type keyCalls struct{ made, answered, allowed uint64 }

var _ store.Store = (*callCountingCounter)(nil)

func (c *callCountingCounter) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	key := string(r.Key) // a copy: r.Key is valid only during the call
	c.count(key, func(k *keyCalls) { k.made++ })
	err := c.RedisCounter.Take(ctx, r, res)
	if err == nil {
		c.count(key, func(k *keyCalls) {
			k.answered++
			if res.Allowed {
				k.allowed++
			}
		})
	}
	return err
}

func (c *callCountingCounter) count(key string, f func(*keyCalls)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]keyCalls{}
	}
	k := c.calls[key]
	f(&k)
	c.calls[key] = k
}

func (c *callCountingCounter) snapshot() map[string]keyCalls {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

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

// TestChaosServerDeathAndReturn kills the server under load, serves on
// through the outage, starts the server again on the same port and checks
// that Redis decides requests again within BreakerCooldown + 1 s. The
// breaker's probes during the outage must fail at once on the refused
// connection, not time out.
func TestChaosServerDeathAndReturn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback bool
	}{
		{"fail open", false},
		{"fallback", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testChaosServerDeath(t, tc.fallback) })
	}
}

func testChaosServerDeath(t *testing.T, fallback bool) {
	const (
		callers       = 16
		tenants       = 4
		window        = time.Second
		fallbackLimit = 10
		cooldown      = 300 * time.Millisecond
		outage        = 1500 * time.Millisecond
		// go-redis's pool, once PoolSize dials in a row have failed, stops
		// dialling and probes once a second instead: that second is the
		// "+ 1 s" of the bound.
		recoveryBound = cooldown + time.Second
	)
	srv := startChaosRedis(t, 0)
	_, portStr, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portStr)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })

	logs := newLogRecorder()
	m := &Metrics{}
	cfg := Config{
		Counter:               NewRedisCounter(rdb),
		Limit:                 1000,
		Window:                window,
		Logger:                logs.logger(),
		Metrics:               m,
		BreakerCooldown:       cooldown,
		DisableOverLimitCache: true, // so that "limited" means Redis decided
	}
	if fallback {
		cfg.Fallback = NewMemoryCounter()
		cfg.FallbackLimit = fallbackLimit
	}
	h := chaosApp(cfg, 0)
	created := time.Now()
	load := startChaosLoad(h, callers, chaosTenants(t, tenants), time.Millisecond)

	// Warm: Redis decides.
	load.awaitRedis(t, m, "before the outage")
	before, beforeAt := m.Snapshot(), time.Now()
	linesBefore := len(logs.lines())

	srv.Stop()
	killed := time.Now()
	time.Sleep(outage)
	during, duringAt := m.Snapshot(), time.Now()
	outageLines := logs.lines()[linesBefore:]

	restarted := time.Now()
	startChaosRedis(t, port) // stopped by its t.Cleanup
	ready := time.Now()
	decided := during.Allowed + during.Limited
	var recovered time.Duration
	// Polled a while past the bound, which is checked below with the
	// lateness the load measured.
	err := poll(recoveryBound+tailSlack+2*time.Second-ready.Sub(restarted), func() error {
		s := m.Snapshot()
		if s.Allowed+s.Limited > decided {
			recovered = time.Since(restarted)
			return nil
		}
		return fmt.Errorf("Redis decided no request since the restart; breaker %v", s.Breaker)
	})
	time.Sleep(200 * time.Millisecond) // a little Redis after the return
	samples := load.finish(t, 5*time.Second)
	lifetime := time.Since(created)

	snap := m.Snapshot()
	lc := countChaosLogs(logs.lines())
	t.Logf("outage %v (server killed, restarted on port %d %v after the kill, ready %v later); Redis decided again %v after the restart (bound %v)",
		outage, port, restarted.Sub(killed).Round(time.Millisecond), ready.Sub(restarted).Round(time.Millisecond),
		recovered.Round(time.Millisecond), recoveryBound)
	t.Logf("during the outage: allowed +%d, limited +%d, failed open +%d, fallback allowed +%d, fallback limited +%d",
		during.Allowed-before.Allowed, during.Limited-before.Limited, during.FailedOpen-before.FailedOpen,
		during.FallbackAllowed-before.FallbackAllowed, during.FallbackLimited-before.FallbackLimited)
	logChaosFigures(t, load, samples, snap, lc)

	if bound := recoveryBound + tailSlack + load.probe.max(); err != nil || recovered > bound {
		t.Errorf("limiting resumed %v after the restart (%v), want within %v (%v)", recovered.Round(time.Millisecond), err, bound, load.probe)
	} else if recovered > recoveryBound {
		// Within the slack: reported, not failed.
		t.Logf("note: Redis decided again %v after the restart, over the %v bound by less than the slack", recovered, recoveryBound)
	}
	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
	checkChaosStatuses(t, samples, snap)
	checkChaosFailureLog(t, lc, lifetime)
	// The breaker tells the outage as one story: it opened once, and
	// closed once Redis was back.
	if lc.open != 1 || lc.closed != 1 || snap.Breaker != "closed" {
		t.Errorf("%d open lines and %d closed lines, breaker now %v; want 1, 1 and closed", lc.open, lc.closed, snap.Breaker)
	}
	// Nothing listens on the port during the outage: the breaker's probes
	// fail at once, and the log says why. While it is open only probes
	// reach the counter, the first a cool-down after the open line, so
	// the failure lines from then on are theirs. (The failure that opened
	// the breaker writes its own line after the open line, and it may be
	// a round trip that was in flight at the kill and read EOF.) A probe
	// that waits on a dial go-redis is still retrying learns of the
	// refusal up to 100 ms later (see testChaosServerDies) and may time
	// out; a limiter that missed the refusal times out on every probe.
	var probes, refused, timedOut int
	var opened time.Time
	for _, l := range outageLines {
		if l.msg == "ratelimit: circuit breaker open" && opened.IsZero() {
			opened = l.at
		}
		if opened.IsZero() || l.at.Before(opened.Add(cooldown)) || !strings.HasPrefix(l.msg, "ratelimit: counter failed") {
			continue
		}
		probes++
		switch {
		case errors.Is(l.err(), syscall.ECONNREFUSED):
			refused++
		case timerule.IsTimeout(l.err()):
			timedOut++
		default:
			t.Errorf("a probe during the outage failed with %v; want the refused connection", l.err())
		}
	}
	if probes == 0 || refused == 0 || timedOut > probes/2 {
		t.Errorf("during the outage %d probes' failures were logged: %d on the refused connection, %d timed out; want most refused: %v",
			probes, refused, timedOut, outageLines)
	}
	if closed := logs.withMsg("ratelimit: circuit breaker closed"); len(closed) == 1 {
		// A probe every cool-down, from the opening to the restart.
		if n, _ := closed[0].int("failed probes"); n < 1 || n > int64(ready.Sub(killed)/cooldown)+1 {
			t.Errorf("the closed line counts %d failed probes; want 1 to %d, one per cool-down of the outage: %v",
				n, int64(ready.Sub(killed)/cooldown)+1, closed[0])
		}
	}

	if !fallback {
		if snap.FailedOpen == 0 {
			t.Error("no request failed open during the outage")
		}
		if snap.FallbackAllowed+snap.FallbackLimited != 0 {
			t.Errorf("a fallback decided %d requests without one configured", snap.FallbackAllowed+snap.FallbackLimited)
		}
		return
	}
	if snap.FailedOpen != 0 {
		t.Errorf("%d requests failed open although the memory fallback cannot fail", snap.FailedOpen)
	}
	if snap.FallbackLimited == 0 {
		t.Errorf("the fallback limited no request: its budget of %d per window is not enforced", fallbackLimit)
	}
	// A tenant's fallback window starts at its first request after the
	// last one ended, so a span of time holds at most span/window + 1
	// starts, each allowing fallbackLimit.
	span := duringAt.Sub(beforeAt)
	windows := uint64(span/window) + 1
	allowed := during.FallbackAllowed - before.FallbackAllowed
	if bound := tenants * fallbackLimit * windows; allowed > bound {
		t.Errorf("the fallback allowed %d requests in %v, want at most %d (%d tenants × %d × %d windows)",
			allowed, span.Round(time.Millisecond), bound, tenants, fallbackLimit, windows)
	}
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
	for _, l := range logs.lines() {
		if timerule.IsTimeout(l.err()) {
			t.Errorf("a line reports a timeout, not the refused connection: %v", l)
		}
	}
	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
}

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
	// lateness, such a request is taken for an instant answer.
	instant := storeTimeout / 2
	if breaker {
		instant += load.probe.max()
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
	checkLatencies(t, "requests that waited on the store after the first failure", waited, load.probe, storeTimeout, storeTimeout*6/5, storeTimeout+tailSlack)
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

// awaitRedis waits until Redis has decided 100 requests of the load, or
// stops the load and fails the test, saying what it was waiting before.
func (l *chaosLoad) awaitRedis(t *testing.T, m *Metrics, before string) {
	t.Helper()
	if err := poll(2*time.Second, func() error {
		if s := m.Snapshot(); s.Allowed+s.Limited < 100 {
			return fmt.Errorf("Redis decided %d requests", s.Allowed+s.Limited)
		}
		return nil
	}); err != nil {
		l.finish(t, 5*time.Second)
		t.Fatalf("%s: %v", before, err)
	}
}

// chaosApp is a gateway limited by cfg, with the tenant in X-Tenant and,
// when deadline is positive, a request deadline that far away.
func chaosApp(cfg Config, deadline time.Duration) fasthttp.RequestHandler {
	h := RateLimitShared(cfg)
	if deadline > 0 {
		h = withDeadline(deadline, h)
	}
	return newApp(h, nil).Handler()
}

func chaosTenants(t *testing.T, n int) []string {
	tenants := make([]string, n)
	for i := range tenants {
		tenants[i] = uniqueTenant(t)
	}
	return tenants
}

// chaosSample is one request: when it started and ended, since the load
// started, its tenant, its status and whether a counter decided it.
type chaosSample struct {
	start, end time.Duration
	tenant     int // index in the load's tenants
	status     int
	counted    bool // the answer says how many requests are left
}

// chaosLoad is callers sending requests in a loop, each pausing pace
// between two, until finish.
type chaosLoad struct {
	t0      time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	panics  atomic.Int64
	mu      sync.Mutex
	samples []chaosSample
	// answered is done once every caller has had its first answer.
	answered sync.WaitGroup
	// probe measures how late the scheduler ran a goroutine that was
	// ready during the load, which every latency figure includes.
	probe *schedProbe
}

func startChaosLoad(h fasthttp.RequestHandler, callers int, tenants []string, pace time.Duration) *chaosLoad {
	l := &chaosLoad{t0: time.Now(), stop: make(chan struct{}), probe: startSchedProbe()}
	l.answered.Add(callers)
	for i := range callers {
		tenant := i % len(tenants)
		l.wg.Go(func() {
			var mine []chaosSample
			defer func() {
				l.mu.Lock()
				l.samples = append(l.samples, mine...)
				l.mu.Unlock()
			}()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := l.since()
				status, counted := l.request(h, tenants[tenant])
				mine = append(mine, chaosSample{start, l.since(), tenant, status, counted})
				if len(mine) == 1 {
					l.answered.Done()
				}
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		})
	}
	return l
}

func (l *chaosLoad) since() time.Duration { return time.Since(l.t0) }

// awaitFirstAnswers waits until every caller has had its first answer, or
// fails t after patience and returns.
func (l *chaosLoad) awaitFirstAnswers(t *testing.T, patience time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { l.answered.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(patience):
		t.Errorf("the callers had no first answer within %v", patience)
	}
}

// request sends one request, and records a panic rather than dying of it.
func (l *chaosLoad) request(h fasthttp.RequestHandler, tenant string) (status int, counted bool) {
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			status = -1
		}
	}()
	resp := send(h, "/", tenant)
	return resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining") != ""
}

// finish stops the callers and returns every request. A caller still
// waiting within patience of the stop holds a request that got no answer.
func (l *chaosLoad) finish(t *testing.T, patience time.Duration) []chaosSample {
	t.Helper()
	defer l.probe.halt()
	close(l.stop)
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatalf("callers still waiting for an answer %v after the load stopped", patience)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// splitAtFirstEnd splits the requests' latencies at the first request to
// end, which the store answered or failed: those that started before it
// were connecting, and had the connecting allowance.
func splitAtFirstEnd(samples []chaosSample) (cold, warm latencies) {
	if len(samples) == 0 {
		return nil, nil
	}
	first := samples[0].end
	for _, s := range samples {
		first = min(first, s.end)
	}
	for _, s := range samples {
		if s.start < first {
			cold = append(cold, s.end-s.start)
		} else {
			warm = append(warm, s.end-s.start)
		}
	}
	return cold, warm
}

// chaosLogs counts a handler's log lines by message. A breaker writes a
// line when it opens and one when it closes; any other line of its, such
// as one for going half-open, is of an unknown kind.
type chaosLogs struct {
	counterFailed int // "counter failed, request decided by ..."
	open          int
	closed        int
	other         int
}

func countChaosLogs(lines []logLine) chaosLogs {
	var c chaosLogs
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.msg, "ratelimit: counter failed, request decided by "):
			c.counterFailed++
		case l.msg == "ratelimit: circuit breaker open":
			c.open++
		case l.msg == "ratelimit: circuit breaker closed":
			c.closed++
		default:
			c.other++
		}
	}
	return c
}

// checkChaosFailureLog checks that counter failures wrote at most one line
// a second over the handler's life, and that every line is of a known
// kind.
func checkChaosFailureLog(t *testing.T, lc chaosLogs, lifetime time.Duration) {
	t.Helper()
	if bound := int(lifetime/time.Second) + 1; lc.counterFailed > bound {
		t.Errorf("%d counter-failure log lines in %v, want at most %d (one a second)",
			lc.counterFailed, lifetime.Round(time.Millisecond), bound)
	}
	if lc.other != 0 {
		t.Errorf("%d log lines of an unknown kind", lc.other)
	}
}

func chaosStatuses(samples []chaosSample) map[int]int {
	counts := map[int]int{}
	for _, s := range samples {
		counts[s.status]++
	}
	return counts
}

// checkChaosStatuses checks that every request got 200 or 429 and was
// counted once, under the decision its status shows.
func checkChaosStatuses(t *testing.T, samples []chaosSample, s MetricsSnapshot) {
	t.Helper()
	st := chaosStatuses(samples)
	ok, refused := uint64(st[fiber.StatusOK]), uint64(st[fiber.StatusTooManyRequests])
	if int(ok+refused) != len(samples) {
		t.Errorf("statuses = %v: %d requests got neither 200 nor 429", st, len(samples)-int(ok+refused))
	}
	if want := s.Allowed + s.FailedOpen + s.FallbackAllowed; ok != want {
		t.Errorf("%d answers 200, but metrics count %d (allowed %d + failed open %d + fallback allowed %d)",
			ok, want, s.Allowed, s.FailedOpen, s.FallbackAllowed)
	}
	if want := s.Limited + s.FallbackLimited; refused != want {
		t.Errorf("%d answers 429, but metrics count %d (limited %d + fallback limited %d)",
			refused, want, s.Limited, s.FallbackLimited)
	}
}

func logChaosFigures(t *testing.T, load *chaosLoad, samples []chaosSample, s MetricsSnapshot, lc chaosLogs) {
	t.Helper()
	all := make(latencies, len(samples))
	var counted latencies
	for i, x := range samples {
		all[i] = x.end - x.start
		if x.counted {
			counted = append(counted, all[i])
		}
	}
	t.Logf("requests %s, statuses %v; of those a counter decided %s; %v",
		all, chaosStatuses(samples), counted, load.probe)
	t.Logf("decided by Redis: allowed %d, limited %d; without it: failed open %d, failed closed %d, fallback allowed %d, fallback limited %d; breaker now %v",
		s.Allowed, s.Limited, s.FailedOpen, s.FailedClosed, s.FallbackAllowed, s.FallbackLimited, s.Breaker)
	t.Logf("log lines: counter failed %d, breaker open %d, closed %d, other %d",
		lc.counterFailed, lc.open, lc.closed, lc.other)
}

// startChaosRedis starts a redis-server of the test's own, on port, or on
// a free one when port is 0, and stops it when the test ends. Starting one
// on the port of a server the test killed brings that server back.
func startChaosRedis(t *testing.T, port int) *redistest.Server {
	t.Helper()
	skipIfShort(t)
	if !haveRedisServer() {
		skipWithoutServer(t, "the chaos tests kill their own redis-server and it is not on PATH: "+howToRunRedisTests)
	}
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(false); err != nil {
				t.Fatal(err)
			}
		}
		s, portTaken, err := redistest.StartOn(p, false)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if !portTaken || port != 0 || attempt == 3 {
			t.Fatal(err)
		}
	}
}

// During an outage a replica writes one line a second, go-redis's own
// included when RedisLogger writes to the limiter's logger: the counter's
// line carries go-redis's last words (its failed dial), and the breaker's
// lines as it opens and as it closes stay. The limiter and go-redis's
// lines run on one fake clock, which moves 10 ms a request through 3 s of
// a killed server and on until the server, started again, closes the
// breaker.
func TestOutageLogsOneLineASecond(t *testing.T) {
	srv := startChaosRedis(t, 0)
	_, portText, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portText)
	clk := newFakeClock()
	clk.Advance(time.Since(clk.Now())) // real time, so that the store's deadlines are near the real ones
	rec := newLogRecorder()
	logger := slog.New(&timeStamp{Handler: rec})
	redis.SetLogger(newRedisLogger(logger, newClock(clk.Now)))
	t.Cleanup(func() {
		redistest.Quiet() // go-redis's own logger off again
		logline.GoRedis.Store(nil)
	})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lim := newLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 1000, Window: time.Minute, Logger: logger}, clk.Now)
	ctx := context.Background()
	if d := lim.Take(ctx, "acme"); d.By != ByCounter {
		t.Fatalf("before the outage: %+v; want decided by the counter", d)
	}
	srv.Stop()
	start := clk.Now()
	for clk.Now().Sub(start) < 3*time.Second {
		lim.Take(ctx, "acme")
		clk.Advance(10 * time.Millisecond)
	}
	startChaosRedis(t, port)
	for i := 0; len(rec.withMsg("ratelimit: circuit breaker closed")) == 0; i++ {
		if i == 500 {
			t.Fatalf("the breaker did not close within 5 s of fake time after the server came back; log %v", rec.lines())
		}
		lim.Take(ctx, "acme")
		clk.Advance(10 * time.Millisecond)
	}

	// Two writers (the limiter's and go-redis's lines) hand lines to the
	// handler, so the lines are checked in the order they were said.
	lines := rec.lines()
	slices.SortStableFunc(lines, func(a, b logLine) int { return a.attrs["at"].Time().Compare(b.attrs["at"].Time()) })
	var last time.Time
	var carried, opened, closed int
	for _, l := range lines {
		switch l.msg {
		case "ratelimit: circuit breaker open":
			opened++
			continue
		case "ratelimit: circuit breaker closed":
			closed++
			continue
		}
		at := l.attrs["at"].Time()
		if !last.IsZero() && at.Sub(last) < time.Second {
			t.Errorf("%q at %v, %v after the line before; want a second at least between lines (log %v)", l.msg, at.Sub(start), at.Sub(last), rec.lines())
		}
		last = at
		if strings.HasPrefix(l.msg, "ratelimit: counter failed") && strings.Contains(l.str("go-redis"), "dial") {
			carried++
		}
	}
	if opened != 1 || closed != 1 || carried == 0 {
		t.Errorf("%d open lines, %d closed lines, %d counter lines with go-redis's failed dial; want 1, 1, and some (log %v)",
			opened, closed, carried, rec.lines())
	}
}

// timeStamp is a handler that adds each record's time, when its line was
// said on the limiter's clock, under "at".
type timeStamp struct{ slog.Handler }

func (c *timeStamp) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.Time("at", r.Time))
	return c.Handler.Handle(ctx, r)
}

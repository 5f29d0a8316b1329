package ratelimit

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/store"
)

// The chaos test that kills the counter's connections under load, on a
// single node, a cluster and a ring: no call may count twice.

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

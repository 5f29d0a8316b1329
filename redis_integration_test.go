package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/gatewaykit/ratelimit/internal/redisstore"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
)

// redisClients are the go-redis clients RedisCounter works with. Each call
// makes a new client with a pool of its own.
var redisClients = []struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}{
	{"single node", func(t *testing.T) redis.UniversalClient { return newRedisClient(t) }},
	// Deadlines reach the socket.
	{"single node with context timeouts", func(t *testing.T) redis.UniversalClient {
		opt := redisOptions(t)
		opt.ContextTimeoutEnabled = true
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}},
	{"cluster", func(t *testing.T) redis.UniversalClient { return newClusterClient(t) }},
	{"ring", func(t *testing.T) redis.UniversalClient { return newRingClient(t) }},
}

// userClient is a redisClient that logs in as an ACL user: client makes
// one for user, admin one as the tests' own user, who may add users.
type userClient struct {
	name   string
	client func(t *testing.T, user, password string) redis.UniversalClient
	admin  func(t *testing.T) redis.UniversalClient
}

var userClients = []userClient{
	{"single node", func(t *testing.T, user, password string) redis.UniversalClient {
		opt := redisOptions(t)
		opt.Username, opt.Password = user, password
		return closedAtEnd(t, redis.NewClient(opt))
	}, func(t *testing.T) redis.UniversalClient { return newRedisClient(t) }},
	{"cluster", func(t *testing.T, user, password string) redis.UniversalClient {
		return closedAtEnd(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t), Username: user, Password: password}))
	}, func(t *testing.T) redis.UniversalClient { return newClusterClient(t) }},
	{"ring", func(t *testing.T, user, password string) redis.UniversalClient {
		opt := ringOptions(t)
		opt.Username, opt.Password = user, password
		return closedAtEnd(t, redis.NewRing(opt))
	}, func(t *testing.T) redis.UniversalClient { return newRingClient(t) }},
}

// closedAtEnd returns rdb, closed when t ends.
func closedAtEnd(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// aclUser adds, on every server of admin, an ACL user of its own with the
// ACL rules, and returns its name and password.
func aclUser(t *testing.T, admin redis.UniversalClient, rules ...string) (user, password string) {
	t.Helper()
	user, password = "u-"+strings.ReplaceAll(uniqueTenant(t), ":", "-"), "secret"
	args := []any{"acl", "setuser", user, "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	if _, err := redisstore.EachServer(context.Background(), admin, func(ctx context.Context, c *redis.Client) error {
		return c.Do(ctx, args...).Err()
	}); err != nil {
		t.Fatalf("ACL SETUSER %s %v: %v", user, rules, err)
	}
	return user, password
}

func TestRedisCounterConformance(t *testing.T) {
	for _, c := range redisClients {
		t.Run(c.name, func(t *testing.T) {
			// Got first, so that a missing server skips the subject once
			// rather than each of its cases.
			keys := c.client(t)
			testCounterConformance(t, func(t *testing.T) counterSubject {
				return counterSubject{
					counter: NewRedisCounter(c.client(t)),
					// Redis expires keys on its own clock.
					advance: time.Sleep,
				}
			})
			requireEveryKeyExpires(t, keys)
		})
	}
}

// TestRedisReplicasShareOneBudget is two gateway replicas over one Redis:
// together they admit Limit requests per window, not Limit each.
func TestRedisReplicasShareOneBudget(t *testing.T) {
	rdb := newRedisClient(t)
	counter := NewRedisCounter(rdb)
	tenant := uniqueTenant(t)
	const window = 300 * time.Millisecond
	a := newReplica(counter, 3, window, tenant)
	b := newReplica(counter, 3, window, tenant)

	start := time.Now()
	expectStatuses(t, "first window", start, []replicaRequest{
		{"A", a, fiber.StatusOK},
		{"A", a, fiber.StatusOK},
		{"B", b, fiber.StatusOK},
		{"A", a, fiber.StatusTooManyRequests},
		{"B", b, fiber.StatusTooManyRequests},
	})

	// Redis's clock decides when the window is over, so ask Redis.
	key := "rl:" + tenant
	err := poll(window+time.Second, func() error {
		if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 0 {
			return fmt.Errorf("EXISTS %s = %d, %v; want 0", key, n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the window did not end: %v", err)
	}

	expectStatuses(t, "second window", time.Now(), []replicaRequest{
		{"B", b, fiber.StatusOK},
		{"A", a, fiber.StatusOK},
		{"B", b, fiber.StatusOK},
		{"A", a, fiber.StatusTooManyRequests},
	})
	requireEveryKeyExpires(t, rdb)
}

// TestRedisReplicasAdmitExactlyTheLimit sends a burst of simultaneous
// requests to three replicas, each with a connection pool of its own: no
// read-modify-write race may let one more through. Fresh replicas connect
// inside the burst, warm ones have already heard from Redis. The test is
// about counting, not speed, so the replicas wait up to two seconds for
// Redis: with the default 100 ms, two busy loops beside the test made a few
// requests of a warm burst (up to 5 of 603) wait past it and fail closed.
func TestRedisReplicasAdmitExactlyTheLimit(t *testing.T) {
	for _, c := range redisClients {
		for _, warm := range []bool{false, true} {
			name := c.name + "/fresh"
			if warm {
				name = c.name + "/warm"
			}
			t.Run(name, func(t *testing.T) {
				testExactlyTheLimit(t, c.client, warm)
			})
		}
	}
}

func testExactlyTheLimit(t *testing.T, client func(t *testing.T) redis.UniversalClient, warm bool) {
	const limit, replicas, requests = 100, 3, 600
	tenant := uniqueTenant(t)
	handlers := make([]fasthttp.RequestHandler, replicas)
	counters := make([]*callCountingCounter, replicas)
	counts := map[int]int{}
	for i := range handlers {
		counters[i] = &callCountingCounter{RedisCounter: NewRedisCounter(client(t))}
		handlers[i] = newReplicaWithTimeout(counters[i], limit, time.Minute, tenant, 2*time.Second)
		if warm {
			counts[serve(handlers[i])]++ // spends one of the budget
		}
	}
	sent := requests + counts[fiber.StatusOK]

	statuses := make([]int, requests)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range statuses {
		h := handlers[i%replicas]
		wg.Go(func() {
			<-release
			statuses[i] = serve(h)
		})
	}
	close(release)
	wg.Wait()

	for _, s := range statuses {
		counts[s]++
	}
	if counts[fiber.StatusOK] != limit || counts[fiber.StatusTooManyRequests] != sent-limit {
		t.Fatalf("statuses = %v, want %d × 200 and %d × 429", counts, limit, sent-limit)
	}

	rdb := client(t)
	key := "rl:" + tenant
	ctx := context.Background()
	// The over-limit cache refuses some requests without asking Redis;
	// every request that asked it got an answer, and the allowed ones
	// counted once each, the refused ones not at all.
	var asked, allowed uint64
	for _, c := range counters {
		calls := c.snapshot()[key]
		if calls.made != calls.answered {
			t.Errorf("%d calls to Redis, %d answered; want all answered", calls.made, calls.answered)
		}
		asked, allowed = asked+calls.made, allowed+calls.allowed
	}
	if n, err := rdb.Get(ctx, key).Int64(); err != nil || n != int64(allowed) || n != limit {
		t.Errorf("GET %s = %d, %v; want %d, the requests Redis allowed: each counted once", key, n, err, limit)
	}
	if asked <= limit || asked > uint64(sent) {
		t.Errorf("%d of %d requests asked Redis; want more than the limit of %d", asked, sent, limit)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL %s = %v, %v; want in (0, 1m]", key, ttl, err)
	}
	requireEveryKeyExpires(t, rdb)
}

// TestRedisCounterFirstBurst is a gateway starting under traffic: a new
// counter's first calls come all at once, on servers that do not have its
// script yet (SCRIPT FLUSH first), so that they answer NOSCRIPT and the
// calls go again with the script's body. Each must count exactly once.
func TestRedisCounterFirstBurst(t *testing.T) {
	for _, c := range redisClients {
		t.Run(c.name, func(t *testing.T) {
			rdb := c.client(t)
			counter := NewRedisCounter(c.client(t))
			key := uniqueKey(t)
			flushScripts(t, rdb)
			const calls, window = 64, 10 * time.Second
			got := make([]int64, calls)
			errs := make([]error, calls)
			release := make(chan struct{})
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					<-release
					got[i], errs[i] = counter.Incr(context.Background(), key, window)
				})
			}
			close(release)
			wg.Wait()
			seen := make([]bool, calls+1)
			for i, n := range got {
				if errs[i] != nil {
					t.Fatalf("call %d of the first burst: %v", i, errs[i])
				}
				if n < 1 || n > calls || seen[n] {
					t.Fatalf("call %d returned %d: want each of 1..%d once, got %v", i, n, calls, got)
				}
				seen[n] = true
			}
			ctx := context.Background()
			if n, err := rdb.Get(ctx, key).Int64(); err != nil || n != calls {
				t.Errorf("GET %s = %d, %v; want %d", key, n, err, calls)
			}
			if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > window {
				t.Errorf("PTTL %s = %v, %v; want in (0, %v]", key, ttl, err, window)
			}
		})
	}
}

func TestRedisCounterErrorNamesTheKey(t *testing.T) {
	// A port nothing listens on: dialling fails at once.
	addr := redistest.ClosedAddr(t)
	rdb := redis.NewClient(&redis.Options{
		Addr:               addr,
		DialTimeout:        200 * time.Millisecond,
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
		MaxRetries:         -1,
	})
	t.Cleanup(func() { rdb.Close() })
	key := uniqueKey(t)
	n, err := NewRedisCounter(rdb).Incr(context.Background(), key, time.Second)
	want := "increment rate limit key " + key + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Incr = %d, %v; want an error beginning %q", n, err, want)
	}
	// Wrapped with %w, so callers can still tell a network error.
	if _, ok := errors.AsType[*net.OpError](err); !ok {
		t.Errorf("Incr's error %q does not wrap the *net.OpError", err)
	}
}

// A key that holds something other than a counter fails its own calls,
// not the others of the same round trip, and is left as it was.
func TestRedisCounterKeyThatIsNotACounter(t *testing.T) {
	for _, c := range redisClients {
		t.Run(c.name, func(t *testing.T) {
			rdb := c.client(t)
			ctx := context.Background()
			bad, good := uniqueKey(t)+":bad", uniqueKey(t)+":good"
			if err := rdb.Set(ctx, bad, "not a number", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			counter := NewRedisCounter(c.client(t))
			// Concurrent, so that they may share round trips.
			var wg sync.WaitGroup
			errs := make([]error, 20)
			for i := range errs {
				key := good
				if i%2 == 0 {
					key = bad
				}
				wg.Go(func() { _, errs[i] = counter.Incr(ctx, key, time.Minute) })
			}
			wg.Wait()
			for i, err := range errs {
				switch {
				case i%2 == 0 && (err == nil || !isKeyAnswer(err) || !strings.Contains(err.Error(), bad) ||
					!strings.Contains(err.Error(), "holds something other than a count")):
					t.Errorf("call %d on %s: %v; want the key named, and an answer about it alone", i, bad, err)
				case i%2 == 1 && err != nil:
					t.Errorf("call %d on %s: %v", i, good, err)
				}
			}
			if v, err := rdb.Get(ctx, bad).Result(); err != nil || v != "not a number" {
				t.Errorf("GET %s = %q, %v; want it untouched", bad, v, err)
			}
			if n, err := rdb.Get(ctx, good).Int64(); err != nil || n != 10 {
				t.Errorf("GET %s = %d, %v; want 10", good, n, err)
			}
		})
	}
}

// flushScripts empties the script cache of every server behind rdb.
func flushScripts(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	flush := func(ctx context.Context, node *redis.Client) error { return node.ScriptFlush(ctx).Err() }
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, flush)
	case *redis.Ring:
		err = c.ForEachShard(ctx, flush)
	default:
		err = rdb.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// A port nothing listens on fails a call at once, with the dial's own
// error, on every kind of client and with go-redis's default dial retries
// (5, 100ms apart) and MaxRetries: neither may eat the caller's wait.
func TestRedisCounterFailsFastOnARefusedDial(t *testing.T) {
	addr := redistest.ClosedAddr(t)
	for _, tt := range []struct {
		name string
		rdb  redis.UniversalClient
	}{
		{"single node", redis.NewClient(&redis.Options{Addr: addr})},
		{"single node with context timeouts", redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer tt.rdb.Close()
			counter := NewRedisCounter(tt.rdb)
			for i := range 3 {
				const wait = 2 * time.Second
				start := time.Now()
				b := &store.Budget{Prefix: "rl:", Name: "default", Algorithm: store.FixedWindow, Limit: 10, Window: time.Minute}
				r := store.Request{Budget: b, Key: []byte("rl:acme"), Tenant: "acme", Cost: 1, Now: start, Deadline: start.Add(wait)}
				res := store.Result{Counts: make([]store.Count, 1+len(b.Quotas))}
				err := counter.Take(context.Background(), &r, &res)
				d := time.Since(start)
				// A Ring that finds its only shard down says so.
				if err == nil || !strings.Contains(err.Error(), "connection refused") &&
					!strings.Contains(err.Error(), "ring shards are down") || d > 100*time.Millisecond {
					t.Fatalf("call %d: %v after %v; want connection refused at once, before go-redis's first dial retry", i, err, d)
				}
			}
		})
	}
}

// uniqueTenant returns a tenant ID whose key, rl:<tenant>, no other test uses.
func uniqueTenant(t *testing.T) string {
	return strings.TrimPrefix(uniqueKey(t), "rl:")
}

// newReplica is one gateway replica: a Fiber app of its own, limited by
// counter. It fails closed, so that a counter error shows as 503 instead of
// passing for an admitted request.
func newReplica(counter store.Store, limit int, window time.Duration, tenant string) fasthttp.RequestHandler {
	return newReplicaWithTimeout(counter, limit, window, tenant, 0)
}

// newReplicaWithTimeout is newReplica with a StoreTimeout; 0 is the default.
func newReplicaWithTimeout(counter store.Store, limit int, window time.Duration, tenant string, storeTimeout time.Duration) fasthttp.RequestHandler {
	app := fiber.New()
	app.Use(RateLimitShared(Config{
		Counter:      counter,
		Limit:        limit,
		Window:       window,
		FailClosed:   true,
		Tenant:       func(*fiber.Ctx) (string, bool) { return tenant, true },
		StoreTimeout: storeTimeout,
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// serve sends GET / to h without a network, as fasthttp's server would, and
// returns the response's status.
func serve(h fasthttp.RequestHandler) int {
	return send(h, "/", "").StatusCode
}

type replicaRequest struct {
	replica string
	handler fasthttp.RequestHandler
	want    int
}

// expectStatuses sends the requests in order. The time since start is in
// the message, as requests that outlast a short window fail for that reason.
func expectStatuses(t *testing.T, what string, start time.Time, reqs []replicaRequest) {
	t.Helper()
	for i, r := range reqs {
		if got := serve(r.handler); got != r.want {
			t.Fatalf("%s: request %d, on replica %s, %v after the first = %d, want %d",
				what, i+1, r.replica, time.Since(start).Round(time.Millisecond), got, r.want)
		}
	}
}

// requireEveryKeyExpires fails the test when any rl:* key on rdb's servers
// has no expiry. That covers keys of tests that ran before: the library must
// never leave a key behind for good, whoever wrote it.
func requireEveryKeyExpires(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	check := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, "rl:*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			ttl, err := node.PTTL(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("PTTL %s: %w", key, err)
			}
			// -2 is a key that expired since SCAN listed it.
			if ttl == -1 {
				return fmt.Errorf("key %s on %s has no expiry", key, node.Options().Addr)
			}
		}
		return iter.Err()
	}
	known, err := redisstore.EachServer(ctx, rdb, check)
	if !known {
		t.Fatalf("cannot scan the servers of a %T", rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
}

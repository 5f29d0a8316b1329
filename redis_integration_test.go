package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// redisPaths are RedisCounter's two ways of counting: the MULTI/EXEC
// transaction of Redis 7, and the script it falls back to on older servers.
var redisPaths = []struct {
	name string
	opts []RedisOption
}{
	{"transaction", nil},
	{"script", []RedisOption{WithScript()}},
}

// redisClients are the go-redis clients RedisCounter works with. Each call
// makes a new client with a pool of its own.
var redisClients = []struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}{
	{"single node", func(t *testing.T) redis.UniversalClient { return newRedisClient(t) }},
	// Deadlines reach the socket: the limiter calls on the request's
	// goroutine while the store answers.
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

func TestRedisCounterConformance(t *testing.T) {
	for _, c := range redisClients {
		for _, path := range redisPaths {
			t.Run(c.name+"/"+path.name, func(t *testing.T) {
				// Got first, so that a missing server skips the subject
				// once rather than each of its cases.
				keys := c.client(t)
				var counters []*RedisCounter
				testCounterConformance(t, func(t *testing.T) counterSubject {
					counter := NewRedisCounter(c.client(t), path.opts...)
					counters = append(counters, counter)
					return counterSubject{
						counter: counter,
						// Redis expires keys on its own clock.
						advance: time.Sleep,
					}
				})
				if path.opts == nil {
					requireTransactionWhereSupported(t, keys, counters...)
				}
				requireEveryKeyExpires(t, keys)
			})
		}
	}
}

// TestRedisReplicasShareOneBudget is two gateway replicas over one Redis:
// together they admit Limit requests per window, not Limit each.
func TestRedisReplicasShareOneBudget(t *testing.T) {
	for _, path := range redisPaths {
		t.Run(path.name, func(t *testing.T) {
			rdb := newRedisClient(t)
			counter := NewRedisCounter(rdb, path.opts...)
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
		})
	}
}

// TestRedisReplicasAdmitExactlyTheLimit sends a burst of simultaneous
// requests to three replicas, each with a connection pool of its own: no
// read-modify-write race may let one more through.
// Fresh replicas run with the default StoreTimeout: a burst that waits its
// turn at Redis must not be taken for a failing store, and they connect
// inside it. Warm ones have already heard from Redis, so the burst's calls
// go direct (with context timeouts) or watched, as many as the pool allows
// each way; they check that both count exactly. They get a StoreTimeout of
// a second: with the default, the first answers of a burst must come within
// 100 ms, which a CPU-starved machine (seen with two busy loops beside the
// test) does not always give.
func TestRedisReplicasAdmitExactlyTheLimit(t *testing.T) {
	for _, c := range redisClients {
		for _, path := range redisPaths {
			for _, warm := range []bool{false, true} {
				name := c.name + "/" + path.name + "/fresh"
				if warm {
					name = c.name + "/" + path.name + "/warm"
				}
				t.Run(name, func(t *testing.T) {
					testExactlyTheLimit(t, c.client, path.opts, warm)
				})
			}
		}
	}
}

func testExactlyTheLimit(t *testing.T, client func(t *testing.T) redis.UniversalClient, opts []RedisOption, warm bool) {
	const limit, replicas, requests = 100, 3, 600
	tenant := uniqueTenant(t)
	handlers := make([]fasthttp.RequestHandler, replicas)
	counters := make([]*RedisCounter, replicas)
	counts := map[int]int{}
	for i := range handlers {
		var storeTimeout time.Duration // the default
		if warm {
			storeTimeout = time.Second
		}
		counters[i] = NewRedisCounter(client(t), opts...)
		handlers[i] = newReplicaWithTimeout(counters[i], limit, time.Minute, tenant, storeTimeout)
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
	if n, err := rdb.Get(ctx, key).Int64(); err != nil || n != int64(sent) {
		t.Errorf("GET %s = %d, %v; want %d: every request counted once", key, n, err, sent)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL %s = %v, %v; want in (0, 1m]", key, ttl, err)
	}
	if opts == nil {
		requireTransactionWhereSupported(t, rdb, counters...)
	}
	requireEveryKeyExpires(t, rdb)
}

// TestRedisCounterFirstBurst is a gateway starting under traffic: a new
// counter's first calls come all at once. Each must count exactly once,
// whatever the server: on one without PEXPIRE NX (Redis 6, KeyDB) every
// call of the burst is refused as a transaction and must be counted by the
// script instead, in the same call; on one with it, the counter must keep
// its transaction.
func TestRedisCounterFirstBurst(t *testing.T) {
	for _, c := range redisClients {
		t.Run(c.name, func(t *testing.T) {
			rdb := c.client(t)
			counter := NewRedisCounter(c.client(t))
			key := uniqueKey(t)
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
			if hasNX := serverHasExpireNX(t, rdb); counter.useScript.Load() == hasNX {
				t.Errorf("after the burst the counter uses its script = %v, on a server where PEXPIRE NX works = %v",
					counter.useScript.Load(), hasNX)
			}
		})
	}
}

// requireTransactionWhereSupported fails the test when a counter uses its
// script although the server takes PEXPIRE NX: it switched quietly, and
// the transaction path that the test meant to check went untested.
func requireTransactionWhereSupported(t *testing.T, rdb redis.UniversalClient, counters ...*RedisCounter) {
	t.Helper()
	if !serverHasExpireNX(t, rdb) {
		return // the switch is checked by TestRedisCounterFirstBurst
	}
	for i, c := range counters {
		if c.useScript.Load() {
			t.Errorf("counter %d switched to its script on a server that takes PEXPIRE NX", i)
		}
	}
}

// serverHasExpireNX asks the server directly, outside the counter, whether
// it takes PEXPIRE ... NX. A key that does not exist makes it a no-op.
func serverHasExpireNX(t *testing.T, rdb redis.UniversalClient) bool {
	t.Helper()
	err := rdb.Do(context.Background(), "pexpire", uniqueKey(t), 1000, "nx").Err()
	switch {
	case err == nil:
		return true
	case strings.Contains(err.Error(), "wrong number of arguments"):
		return false
	}
	t.Fatalf("PEXPIRE NX on a missing key: %v", err)
	return false
}

// TestRedisCounterOnPEXPIRERefusedAtExec is a server that refuses PEXPIRE NX
// only once the transaction runs, after its INCR has counted. Running the
// script then would count the request twice: the call must fail instead,
// and the script, used from then on, must give the key its expiry.
func TestRedisCounterOnPEXPIRERefusedAtExec(t *testing.T) {
	direct, rdb, _ := proxiedClients(t, refusedAtExec)
	ctx := context.Background()

	counter := NewRedisCounter(rdb)
	key := uniqueKey(t)
	const window = 10 * time.Second
	if n, err := counter.Incr(ctx, key, window); err == nil {
		t.Fatalf("first Incr = %d, nil; want an error: its INCR ran without an expiry", n)
	}
	if n, err := direct.Get(ctx, key).Int64(); err != nil || n != 1 {
		t.Fatalf("GET %s = %d, %v; want 1: the request counted once, not again by the script", key, n, err)
	}
	if !counter.useScript.Load() {
		t.Fatal("the counter did not switch to the script")
	}
	if got, err := counter.Incr(ctx, key, window); err != nil || got != 2 {
		t.Fatalf("second Incr = %d, %v; want 2", got, err)
	}
	if ttl, err := direct.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > window {
		t.Fatalf("PTTL %s = %v, %v; want in (0, %v]: the script sets the missing expiry", key, ttl, err, window)
	}
}

func TestRedisCounterErrorNamesTheKey(t *testing.T) {
	// A port nothing listens on: dialling fails at once.
	addr := closedPort(t)
	rdb := redis.NewClient(&redis.Options{
		Addr:               addr,
		DialTimeout:        200 * time.Millisecond,
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
		MaxRetries:         -1,
	})
	t.Cleanup(func() { rdb.Close() })
	for _, path := range redisPaths {
		t.Run(path.name, func(t *testing.T) {
			key := uniqueKey(t)
			n, err := NewRedisCounter(rdb, path.opts...).Incr(context.Background(), key, time.Second)
			want := "increment rate limit key " + key + ": "
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Incr = %d, %v; want an error beginning %q", n, err, want)
			}
			// Wrapped with %w, so callers can still tell a network error.
			if _, ok := errors.AsType[*net.OpError](err); !ok {
				t.Errorf("Incr's error %q does not wrap the *net.OpError", err)
			}
		})
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// uniqueTenant returns a tenant ID whose key, rl:<tenant>, no other test uses.
func uniqueTenant(t *testing.T) string {
	return strings.TrimPrefix(uniqueKey(t), "rl:")
}

// newReplica is one gateway replica: a Fiber app of its own, limited by
// counter. It fails closed, so that a counter error shows as 503 instead of
// passing for an admitted request.
func newReplica(counter Counter, limit int, window time.Duration, tenant string) fasthttp.RequestHandler {
	return newReplicaWithTimeout(counter, limit, window, tenant, 0)
}

// newReplicaWithTimeout is newReplica with a StoreTimeout; 0 is the default.
func newReplicaWithTimeout(counter Counter, limit int, window time.Duration, tenant string, storeTimeout time.Duration) fasthttp.RequestHandler {
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
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.SetMethod(fiber.MethodGet)
	h(&ctx)
	return ctx.Response.StatusCode()
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
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		err = check(ctx, c)
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Ring:
		err = c.ForEachShard(ctx, check)
	default:
		t.Fatalf("cannot scan the servers of a %T", rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// proxiedClients returns a client of the shared server and one that reaches
// it through a redisProxy with rewrite, both closed when the test ends.
func proxiedClients(t *testing.T, rewrite func([]string) []string) (direct, viaProxy *redis.Client, proxy *redisProxy) {
	t.Helper()
	opt := redisOptions(t)
	if opt.TLSConfig != nil {
		t.Skip("the proxy reads plain RESP and TEST_REDIS_URL uses TLS")
	}
	direct = redis.NewClient(opt)
	t.Cleanup(func() { direct.Close() })
	proxy = startRedisProxy(t, opt.Addr, rewrite)
	proxied := *opt
	proxied.Addr = proxy.addr()
	viaProxy = redis.NewClient(&proxied)
	t.Cleanup(func() { viaProxy.Close() })
	return direct, viaProxy, proxy
}

// redisProxy sits in front of a real Redis and forwards every command
// unchanged but PEXPIRE with options, which it hands to rewrite. The server
// stays real; only the bytes change. It stands in for a server that refuses
// PEXPIRE NX only at EXEC, which no server here does; every other server
// behaviour is tested on the real servers.
type redisProxy struct {
	ln        net.Listener
	target    string
	rewrite   func(args []string) []string
	rewritten atomic.Int64 // PEXPIRE commands rewritten
	wg        sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// refusedAtExec makes the server refuse PEXPIRE NX with the same error, but
// only when EXEC runs it, after the INCR queued before it has run: a
// Redis-compatible server might do that.
func refusedAtExec([]string) []string {
	return []string{"eval", `return redis.error_reply("ERR wrong number of arguments for 'pexpire' command")`, "0"}
}

func startRedisProxy(t *testing.T, target string, rewrite func([]string) []string) *redisProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &redisProxy{ln: ln, target: target, rewrite: rewrite}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *redisProxy) addr() string { return p.ln.Addr().String() }

func (p *redisProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		// Either side's end closes the other, which ends the other copy.
		p.wg.Go(func() {
			_, _ = io.Copy(client, server)
			client.Close()
		})
		p.wg.Go(func() {
			p.forwardCommands(server, client)
			server.Close()
		})
	}
}

func (p *redisProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

func (p *redisProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// forwardCommands copies the client's commands to the server, rewriting
// PEXPIRE key ms <option>.
func (p *redisProxy) forwardCommands(server io.Writer, client io.Reader) {
	r := bufio.NewReader(client)
	w := bufio.NewWriter(server)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		if len(args) > 3 && strings.EqualFold(args[0], "pexpire") {
			args = p.rewrite(args)
			p.rewritten.Add(1)
		}
		fmt.Fprintf(w, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
		}
		// Flush once the client has sent all it has, so that a pipeline
		// reaches the server as one.
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// readCommand reads one command as clients send it: a RESP array of bulk
// strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	n, err := readLength(r, '*')
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		size, err := readLength(r, '$')
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2) // and its CRLF
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func readLength(r *bufio.Reader, prefix byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[0] != prefix || !strings.HasSuffix(line, "\r\n") {
		return 0, fmt.Errorf("unexpected RESP line %q", line)
	}
	n, err := strconv.Atoi(line[1 : len(line)-2])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad RESP length in %q", line)
	}
	return n, nil
}

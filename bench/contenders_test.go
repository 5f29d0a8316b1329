package bench

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"
)

const (
	window = time.Minute
	// bigLimit is a budget no benchmark spends, so every contender takes
	// its allowed path.
	bigLimit = 1 << 30
	// redisCallers is how many goroutines call Redis at once, as on a busy
	// gateway replica.
	redisCallers = 64
)

var errDenied = errors.New("request denied: the budget should never run out in a benchmark")

// A redisOpts is a variant of the go-redis options the Redis contenders run
// on. Both have a pool of redisCallers connections, dialled before the
// timer; they differ only in ContextTimeoutEnabled.
type redisOpts struct {
	name string
	// ctxTimeout sets ContextTimeoutEnabled, which lets go-redis apply a
	// context's deadline to its socket, as the ratelimit README advises.
	// Only ours passes contexts with deadlines (its StoreTimeout); the
	// peers' calls and the raw loop's are the same either way.
	ctxTimeout bool
}

var (
	optsDefault    = redisOpts{"default", false}
	optsCtxTimeout = redisOpts{"ctxtimeout", true}
)

// redisClient connects to BENCH_REDIS_URL with a pool of redisCallers and
// the options o, or skips tb when it is unset.
func redisClient(tb testing.TB, o redisOpts) *redis.Client {
	url := os.Getenv("BENCH_REDIS_URL")
	if url == "" {
		tb.Skip("BENCH_REDIS_URL is unset: run bench/run.sh, or point it at a Redis you may FLUSHDB")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("BENCH_REDIS_URL: %v", err)
	}
	opt.PoolSize = redisCallers
	opt.ContextTimeoutEnabled = o.ctxTimeout
	rdb := redis.NewClient(opt)
	tb.Cleanup(func() { rdb.Close() })
	if err := fillPool(context.Background(), rdb); err != nil {
		tb.Fatalf("ping %s: %v", url, err)
	}
	return rdb
}

// fillPool dials rdb's whole pool of redisCallers connections, by as many
// PINGs at once, so that no timed op pays for a connection.
func fillPool(ctx context.Context, rdb *redis.Client) error {
	errs := make(chan error, redisCallers)
	for range redisCallers {
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	var first error
	for range redisCallers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// benchRedis returns, for a redis benchmark, a client with the options o on
// an empty database, with b set to run redisCallers goroutines; for a
// memory one, nil.
func benchRedis(b *testing.B, backend string, o redisOpts) *redis.Client {
	if backend != "redis" {
		return nil
	}
	rdb := redisClient(b, o)
	if err := rdb.FlushDB(b.Context()).Err(); err != nil {
		b.Fatal(err)
	}
	redisParallelism(b)
	return rdb
}

// redisParallelism makes b.RunParallel run redisCallers goroutines.
func redisParallelism(b *testing.B) {
	b.SetParallelism(max(1, redisCallers/runtime.GOMAXPROCS(0)))
}

// tenantHeader is ours' Tenant: every contender keys by X-Tenant.
func tenantHeader(c *fiber.Ctx) (string, bool) {
	id := c.Get("X-Tenant")
	return id, id != ""
}

// peerKey is the key the peers count under, the same "rl:<tenant>" as
// ours. The concatenation copies the header out of fasthttp's reused
// buffer, as ours does, so that a store may keep the key.
func peerKey(c *fiber.Ctx) string { return "rl:" + c.Get("X-Tenant") }

// A handlerContender builds a middleware allowing limit requests per window
// and tenant; rdb is nil for memory contenders. A nil handler is the bare app.
type handlerContender struct {
	name string
	new  func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler
}

var (
	bare = handlerContender{"bare", func(testing.TB, redis.UniversalClient, int) fiber.Handler { return nil }}

	// Two floors for the handler figures: a middleware that does nothing,
	// and one that reads the tenant and sets the five header fields ours
	// sets (constant values, names in fasthttp's normalized form), without
	// counting anything.
	noop = handlerContender{"floor-noop", func(testing.TB, redis.UniversalClient, int) fiber.Handler {
		return func(c *fiber.Ctx) error { return c.Next() }
	}}
	headersFloor = handlerContender{"floor-headers", func(testing.TB, redis.UniversalClient, int) fiber.Handler {
		fields := [][2][]byte{
			{[]byte("X-Ratelimit-Limit"), []byte("1073741824")},
			{[]byte("X-Ratelimit-Remaining"), []byte("1073741823")},
			{[]byte("X-Ratelimit-Reset"), []byte("60")},
			{[]byte("Ratelimit-Policy"), []byte(`"default";q=1073741824;w=60`)},
			{[]byte("Ratelimit"), []byte(`"default";r=1073741823;t=60`)},
		}
		return func(c *fiber.Ctx) error {
			if _, ok := tenantHeader(c); !ok {
				return errDenied
			}
			for _, f := range fields {
				c.Response().Header.SetCanonical(f[0], f[1])
			}
			return c.Next()
		}
	}}

	ours = handlerContender{"ratelimit", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		return oursHandler(tb, ratelimit.Config{Counter: counterFor(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader})
	}}

	oursNoHeaders = handlerContender{"ratelimit-noheaders", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		return oursHandler(tb, ratelimit.Config{
			Counter: counterFor(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader,
			DisableLegacyHeaders: true, DisableDraftHeaders: true,
		})
	}}

	// Ours on the sliding window.
	oursSliding = handlerContender{"ratelimit-sliding", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		return oursHandler(tb, ratelimit.Config{
			Counter: counterFor(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader, Algorithm: ratelimit.SlidingWindow,
		})
	}}

	// Ours with a plan for every tenant, read from a map, and a Cost
	// function: the budget and the headers are the tenant's own, which
	// differ from Options', and each request costs 1.
	oursPlans = handlerContender{"ratelimit-plans-cost", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		plans := map[string]ratelimit.Plan{}
		for _, id := range tenantIDs(10000) {
			plans[string(id)] = ratelimit.Plan{Limit: limit}
		}
		return oursHandler(tb, ratelimit.Config{
			Counter: counterFor(tb, rdb), Limit: 1000, Window: window, Tenant: tenantHeader,
			PlanFor: func(tenant string) ratelimit.Plan { return plans[tenant] },
			Cost:    func(*fiber.Ctx) int { return 1 },
		})
	}}

	// Ours without its over-limit cache: every request asks the counter.
	oursNoCache = handlerContender{"ratelimit-nocache", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		return oursHandler(tb, ratelimit.Config{
			Counter: counterFor(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader,
			DisableOverLimitCache: true,
		})
	}}

	fiberLimiter = handlerContender{"fiber-limiter", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		cfg := fiberlimiter.Config{Max: limit, Expiration: window, KeyGenerator: peerKey}
		if rdb != nil {
			cfg.Storage = fiberredis.NewFromConnection(rdb)
		}
		return fiberlimiter.New(cfg)
	}}

	ululeMemory = handlerContender{"ulule-memory", func(tb testing.TB, _ redis.UniversalClient, limit int) fiber.Handler {
		return ululeMiddleware(ulule.New(ululememory.NewStore(), ulule.Rate{Period: window, Limit: int64(limit)}))
	}}

	ululeRedis = handlerContender{"ulule-redis", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		return ululeMiddleware(newUluleRedis(tb, rdb, limit))
	}}

	sethvargo = handlerContender{"sethvargo-memorystore", func(tb testing.TB, _ redis.UniversalClient, limit int) fiber.Handler {
		store := newSethvargo(tb, limit)
		// As sethvargo's own httplimit middleware does it, headers included.
		return func(c *fiber.Ctx) error {
			limit, remaining, reset, ok, err := store.Take(c.UserContext(), peerKey(c))
			if err != nil {
				return fiber.ErrInternalServerError
			}
			resetTime := time.Unix(0, int64(reset)).UTC().Format(time.RFC1123)
			c.Set("X-RateLimit-Limit", strconv.FormatUint(limit, 10))
			c.Set("X-RateLimit-Remaining", strconv.FormatUint(remaining, 10))
			c.Set("X-RateLimit-Reset", resetTime)
			if !ok {
				c.Set("Retry-After", resetTime)
				return fiber.ErrTooManyRequests
			}
			return c.Next()
		}
	}}

	xTimeRate = handlerContender{"x-time-rate", func(tb testing.TB, _ redis.UniversalClient, limit int) fiber.Handler {
		m := newRateMap(limit)
		return func(c *fiber.Ctx) error {
			if !m.allow(peerKey(c)) {
				return fiber.ErrTooManyRequests
			}
			return c.Next()
		}
	}}

	redisRate = handlerContender{"redis-rate", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		l, lim := redis_rate.NewLimiter(rdb), redisRateLimit(limit)
		return func(c *fiber.Ctx) error {
			res, err := l.Allow(c.UserContext(), peerKey(c), lim)
			if err != nil {
				return fiber.ErrInternalServerError
			}
			c.Set("X-RateLimit-Limit", strconv.Itoa(limit))
			c.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
			if res.Allowed == 0 {
				return fiber.ErrTooManyRequests
			}
			return c.Next()
		}
	}}

	rawMultiExec = handlerContender{"raw-multi-exec", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
		return func(c *fiber.Ctx) error {
			n, err := rawIncr(c.UserContext(), rdb, peerKey(c))
			if err != nil {
				return fiber.ErrInternalServerError
			}
			if n > int64(limit) {
				return fiber.ErrTooManyRequests
			}
			return c.Next()
		}
	}}
)

// oursMetrics holds the Metrics of ours' handlers and limiters by the test
// or benchmark that built them. A request that ours let through because the
// counter did not answer within StoreTimeout (failing open) answers 200
// like a counted one, and skips the round trip: reportFailOpen tells them
// apart.
var oursMetrics sync.Map // testing.TB → *ratelimit.Metrics

// oursHandler is RateLimitShared(cfg) with a Metrics of its own, kept in
// oursMetrics for tb.
func oursHandler(tb testing.TB, cfg ratelimit.Config) fiber.Handler {
	m := new(ratelimit.Metrics)
	cfg.Metrics = m
	oursMetrics.Store(tb, m)
	tb.Cleanup(func() { oursMetrics.CompareAndDelete(tb, m) })
	return ratelimit.RateLimitShared(cfg)
}

// oursLimiter is NewLimiter(opts) with a Metrics of its own, kept in
// oursMetrics for tb as oursHandler's is.
func oursLimiter(tb testing.TB, opts ratelimit.Options) *ratelimit.Limiter {
	m := new(ratelimit.Metrics)
	opts.Metrics = m
	oursMetrics.Store(tb, m)
	tb.Cleanup(func() { oursMetrics.CompareAndDelete(tb, m) })
	return ratelimit.NewLimiter(opts)
}

// reportFailOpen reports, when b built one of ours' handlers, how many
// requests that handler let through uncounted (the "failopen" metric, 0
// when all is well), and logs them when there were any.
func reportFailOpen(b *testing.B) {
	m, ok := oursMetrics.Load(b)
	if !ok {
		return
	}
	s := m.(*ratelimit.Metrics).Snapshot()
	b.ReportMetric(float64(s.FailedOpen), "failopen")
	if s.FailedOpen > 0 {
		b.Logf("ratelimit failed open on %d of %d requests (the counter did not answer in time, or failed)",
			s.FailedOpen, s.Allowed+s.Limited+s.FailedOpen)
	}
}

func counterFor(tb testing.TB, rdb redis.UniversalClient) store.Store {
	if rdb != nil {
		return ratelimit.NewRedisCounter(rdb)
	}
	m := ratelimit.NewMemoryCounter()
	tb.Cleanup(func() { m.Close() })
	return m
}

// ululeMiddleware is what ulule's fasthttp middleware does (it has none
// for Fiber), headers included.
func ululeMiddleware(l *ulule.Limiter) fiber.Handler {
	return func(c *fiber.Ctx) error {
		lc, err := l.Get(c.UserContext(), peerKey(c))
		if err != nil {
			return fiber.ErrInternalServerError
		}
		c.Set("X-RateLimit-Limit", strconv.FormatInt(lc.Limit, 10))
		c.Set("X-RateLimit-Remaining", strconv.FormatInt(lc.Remaining, 10))
		c.Set("X-RateLimit-Reset", strconv.FormatInt(lc.Reset, 10))
		if lc.Reached {
			return fiber.ErrTooManyRequests
		}
		return c.Next()
	}
}

func newUluleRedis(tb testing.TB, rdb redis.UniversalClient, limit int) *ulule.Limiter {
	store, err := ululeredis.NewStore(rdb)
	if err != nil {
		tb.Fatalf("ulule redis store: %v", err)
	}
	return ulule.New(store, ulule.Rate{Period: window, Limit: int64(limit)})
}

func newSethvargo(tb testing.TB, limit int) interface {
	Take(ctx context.Context, key string) (uint64, uint64, uint64, bool, error)
} {
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: window})
	if err != nil {
		tb.Fatalf("sethvargo memorystore: %v", err)
	}
	tb.Cleanup(func() { store.Close(context.Background()) })
	return store
}

// redis_rate is GCRA: a burst of limit, refilled over the window.
func redisRateLimit(limit int) redis_rate.Limit {
	return redis_rate.Limit{Rate: limit, Burst: limit, Period: window}
}

// rateMap is x/time/rate as an operator usually wires it per key: one
// map behind one plain mutex, a token bucket per key (burst limit, refilled
// over the window), idle keys never dropped.
type rateMap struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	every rate.Limit
	burst int
}

func newRateMap(limit int) *rateMap {
	return &rateMap{m: make(map[string]*rate.Limiter), every: rate.Limit(float64(limit) / window.Seconds()), burst: limit}
}

func (r *rateMap) allow(key string) bool {
	r.mu.Lock()
	l := r.m[key]
	if l == nil {
		l = rate.NewLimiter(r.every, r.burst)
		r.m[key] = l
	}
	r.mu.Unlock()
	return l.Allow()
}

// rawIncr is the floor for one round trip per request: INCR and
// PEXPIRE NX in one MULTI/EXEC.
func rawIncr(ctx context.Context, rdb redis.UniversalClient, key string) (int64, error) {
	pipe := rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	pipe.Do(ctx, "pexpire", key, window.Milliseconds(), "nx")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return incr.Val(), nil
}

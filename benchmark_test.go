package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/memstore"
	"github.com/gatewaykit/ratelimit/internal/mono"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// benchKeys returns n keys built before the timer starts.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "rl:tenant" + strconv.Itoa(i)
	}
	return keys
}

// runParallel spreads b.N calls of fn over keys. Each goroutine starts at
// its own offset and walks on by itself: a shared atomic bumped on every op
// would measure contention on that atomic, not the code under test.
func runParallel(b *testing.B, keys []string, fn func(key string)) {
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(7919)) // a prime stride keeps goroutines apart
		for pb.Next() {
			fn(keys[i%len(keys)])
			i++
		}
	})
}

func BenchmarkMemoryCounter(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(strconv.Itoa(n)+"keys", func(b *testing.B) {
			m := NewMemoryCounter()
			defer m.Close()
			ctx := context.Background()
			runParallel(b, benchKeys(n), func(key string) {
				if _, err := m.Incr(ctx, key, time.Hour); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// benchHandler drives app through app.Handler with one reused RequestCtx per
// goroutine, the way fasthttp serves a keep-alive connection. Tenants come
// from the X-Tenant header through c.Locals.
func benchHandler(b *testing.B, limiter fiber.Handler, tenants int) {
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		c.Locals("tenant", c.Get("X-Tenant"))
		return c.Next()
	})
	if limiter != nil {
		app.Use(limiter)
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	h := app.Handler()

	ids := make([][]byte, tenants)
	for i := range ids {
		ids[i] = []byte("tenant" + strconv.Itoa(i))
	}
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/")
		i := int(start.Add(7919))
		for pb.Next() {
			// fasthttp's server resets the response before each request
			// of a connection; the limiter appends to RateLimit fields.
			ctx.Response.Reset()
			ctx.Request.Header.SetBytesV("X-Tenant", ids[i%len(ids)])
			h(&ctx)
			i++
		}
	})
}

func BenchmarkRateLimitShared(b *testing.B) {
	// A limit no tenant reaches, so every request takes the allowed path.
	const limit = 1 << 40
	for _, tenants := range []int{1, 10000} {
		suffix := "/" + strconv.Itoa(tenants) + "tenants"
		b.Run("bare"+suffix, func(b *testing.B) { benchHandler(b, nil, tenants) })
		b.Run("memory"+suffix, func(b *testing.B) {
			benchHandler(b, RateLimitShared(Config{Limit: limit, Window: time.Hour}), tenants)
		})
		b.Run("memory-noheaders"+suffix, func(b *testing.B) {
			benchHandler(b, RateLimitShared(Config{
				Limit: limit, Window: time.Hour, DisableLegacyHeaders: true, DisableDraftHeaders: true,
			}), tenants)
		})
	}
}

// BenchmarkRedisCounter is one decision per op on a real Redis, from 64
// concurrent callers sharing one client, as a busy gateway replica would.
func BenchmarkRedisCounter(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(strconv.Itoa(n)+"keys", func(b *testing.B) {
			opt := redisOptions(b)
			opt.PoolSize = 64
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			c := NewRedisCounter(rdb)
			ctx := context.Background()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			runParallel(b, benchKeys(n), func(key string) {
				if _, err := c.Incr(ctx, key, time.Hour); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkQuotasInMemory is a Limiter on a MemoryCounter over 10,000
// tenants, with the main limit alone and with a day's and a month's quota,
// the response headers written (Fiber's writer): both allow every request.
func BenchmarkQuotasInMemory(b *testing.B) {
	for _, c := range []struct {
		name   string
		quotas []Quota
	}{{"alone", nil}, {"day+month", []Quota{{Name: "day", Limit: 1 << 40, Calendar: CalendarDay}, {Name: "month", Limit: 1 << 40, Calendar: CalendarMonth}}}} {
		b.Run(c.name, func(b *testing.B) {
			lim := NewLimiter(Options{Limit: 1 << 40, Window: time.Hour, Quotas: c.quotas})
			tenants := make([]string, 10000)
			for i := range tenants {
				tenants[i] = "tenant" + strconv.Itoa(i)
			}
			var start atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var h fasthttp.ResponseHeader
				i := int(start.Add(7919))
				for pb.Next() {
					var d Decision
					lim.take(context.Background(), &d, tenants[i%len(tenants)], 1)
					if !d.Allowed {
						b.Fatal(d)
					}
					h.Reset()
					d.SetFastHTTPHeaders(&h)
					i++
				}
			})
		})
	}
}

// BenchmarkTakeSpread is Limiter.Take on a MemoryCounter over 10,000
// tenants, with every goroutine walking all the tenants (each tenant's
// window then passes between the cores) or each goroutine its own share
// of them (each window stays on one core). docs/benchmarks.md at 719ca7e compares
// the two on two cores.
func BenchmarkTakeSpread(b *testing.B) {
	keys := benchKeys(10000)
	for _, spread := range []string{"all-tenants", "own-share"} {
		b.Run(spread, func(b *testing.B) {
			l := NewLimiter(Options{Limit: 1 << 40, Window: time.Hour})
			ctx := context.Background()
			for _, k := range keys {
				l.Take(ctx, k)
			}
			procs := runtime.GOMAXPROCS(0)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := int(next.Add(1)) - 1
				i := g * 7919 // a prime stride keeps goroutines apart
				for pb.Next() {
					k := keys[i%len(keys)]
					if spread == "own-share" {
						// Goroutine g takes the tenants whose index is g
						// modulo procs.
						k = keys[(i%(len(keys)/procs))*procs+g%procs]
					}
					if !l.Take(ctx, k).Allowed {
						b.Fatal("refused")
					}
					i++
				}
			})
		})
	}
}

// nothingStore is a store that decides nothing: every request fits, and
// its answer is written as MemoryCounter writes one.
type nothingStore struct{}

func (*nothingStore) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.All, Local: true}, nil
}

func (*nothingStore) Take(_ context.Context, r *store.Request, res *store.Result) error {
	res.Allowed = true
	res.Counts[0] = store.Count{N: r.Cost + int64(len(r.Key)), Fits: true, Left: r.Window, Length: r.Window, Mark: 1}
	return nil
}

func (*nothingStore) Give(context.Context, *store.Request, store.Marks) error { return nil }
func (*nothingStore) Reset(context.Context, *store.Request) error             { return nil }

// BenchmarkSeamCall is what crossing the seam costs a request: a request
// made as the limiter makes one (its key built), handed to its store
// through the interface, and the result read back, for a store that does
// nothing else.
func BenchmarkSeamCall(b *testing.B) {
	lim := NewLimiter(Options{Limit: 1 << 40, Window: time.Hour, Counter: &nothingStore{}})
	ctx := context.Background()
	var n int64
	for b.Loop() {
		r := lim.newRequest("tenant42", mono.Epoch)
		res := r.result()
		_ = lim.store.Take(ctx, &r.Request, res)
		n += res.Counts[0].N
		r.free()
	}
	if n == 0 {
		b.Fatal("the store counted nothing")
	}
}

// BenchmarkRequestTime is what a request's time costs: the clock read as
// Request.Now (a time.Time) and turned back into the memory engine's
// nanoseconds, beside the one reading of the monotonic clock that the
// engine needs.
func BenchmarkRequestTime(b *testing.B) {
	var n int64
	b.Run("time.Time", func(b *testing.B) {
		var c clock
		for b.Loop() {
			n += memstore.Nanos(c.mono())
		}
	})
	b.Run("nanoseconds", func(b *testing.B) {
		for b.Loop() {
			n += int64(time.Since(mono.Epoch))
		}
	})
	if n == 0 {
		b.Fatal("no time passed")
	}
}

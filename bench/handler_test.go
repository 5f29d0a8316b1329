package bench

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

var memoryHandlers = []handlerContender{bare, noop, headersFloor, ours, oursNoHeaders, oursSliding, oursPlans, fiberLimiter, ululeMemory, sethvargo, xTimeRate}

// A redisRun is the contenders that run on one variant of the client's
// options. Ours and the raw loop run on both, so that their ratio shows
// for each; the peers, whose calls carry no deadline and so are the same on
// both, run on go-redis's defaults only.
type redisRun struct {
	opts       redisOpts
	contenders []handlerContender
}

var (
	redisHandlers = []redisRun{
		{optsDefault, []handlerContender{bare, ours, oursNoHeaders, oursSliding, oursPlans, oursAutoPipe, fiberLimiter, ululeRedis, redisRate, rawMultiExec}},
		{optsCtxTimeout, []handlerContender{bare, ours, oursSliding, oursAutoPipe, rawMultiExec}},
	}
	loneHandlers = []redisRun{
		{optsDefault, []handlerContender{bare, ours, oursAutoPipe, fiberLimiter, ululeRedis, redisRate, rawMultiExec}},
		{optsCtxTimeout, []handlerContender{bare, ours, oursAutoPipe, rawMultiExec}},
	}
)

// newApp is one GET / route answering 200, behind mw unless it is nil.
func newApp(mw fiber.Handler) *fiber.App {
	app := fiber.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app
}

func tenantIDs(n int) [][]byte {
	ids := make([][]byte, n)
	for i := range ids {
		ids[i] = []byte("tenant" + strconv.Itoa(i))
	}
	return ids
}

// BenchmarkHandler is one allowed request per op through app.Handler(), as
// fasthttp serves a keep-alive connection: one reused RequestCtx per
// goroutine, the tenant in X-Tenant. On Redis, redisCallers goroutines
// call at once, on each variant of the client's options.
func BenchmarkHandler(b *testing.B) {
	for _, tenants := range []int{1, 10000} {
		ids := tenantIDs(tenants)
		for _, c := range memoryHandlers {
			b.Run(fmt.Sprintf("memory/tenants=%d/%s", tenants, c.name), func(b *testing.B) {
				driveHandler(b, newApp(c.new(b, nil, bigLimit)).Handler(), ids)
			})
		}
	}
	for _, run := range redisHandlers {
		for _, tenants := range []int{1, 10000} {
			ids := tenantIDs(tenants)
			for _, c := range run.contenders {
				b.Run(fmt.Sprintf("redis/opts=%s/tenants=%d/%s", run.opts.name, tenants, c.name), func(b *testing.B) {
					rdb := benchRedis(b, "redis", run.opts)
					driveHandler(b, newApp(c.new(b, rdb, bigLimit)).Handler(), ids)
				})
			}
		}
	}
}

// walkParallel times b.N ops spread over RunParallel's goroutines. Each
// goroutine gets its op from newOp and calls it with i, i+1, ... from an
// offset of its own: a shared counter bumped per op would measure that
// counter's cache line, not the code under test. An op that returns false
// has reported a failure, and its goroutine stops.
func walkParallel(b *testing.B, newOp func() func(i int) bool) {
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		op := newOp()
		i := int(start.Add(7919)) // a prime stride keeps goroutines apart
		for pb.Next() {
			if !op(i) {
				return
			}
			i++
		}
	})
}

func driveHandler(b *testing.B, h fasthttp.RequestHandler, tenants [][]byte) {
	// One request per tenant first, so that the timed ones find live
	// windows, as on a gateway whose tenants keep calling.
	var warm fasthttp.RequestCtx
	for _, id := range tenants {
		warm.Response.Reset()
		warm.Request.SetRequestURI("/")
		warm.Request.Header.SetBytesV("X-Tenant", id)
		h(&warm)
	}
	walkParallel(b, func() func(int) bool {
		var ctx fasthttp.RequestCtx
		return func(i int) bool {
			ctx.Response.Reset()
			ctx.Request.SetRequestURI("/")
			ctx.Request.Header.SetBytesV("X-Tenant", tenants[i%len(tenants)])
			h(&ctx)
			if code := ctx.Response.StatusCode(); code != fiber.StatusOK {
				b.Errorf("status %d, want 200: %s", code, ctx.Response.Body())
				return false
			}
			return true
		}
	})
	b.StopTimer()
	reportFailOpen(b)
}

// BenchmarkHandlerLone is BenchmarkHandler's Redis case with a lone caller:
// one goroutine sends one request after another (no RunParallel), so ns/op
// is the latency of one request when nothing else is in flight. One
// tenant, whose window the warm-up opens.
//
// Its "paired" contender alternates a request through ours and one through
// raw-multi-exec, on one client, and times each: on a machine whose speed
// drifts, their ratio (the ratelimit/raw metric) is steadier than that of
// two sub-benchmarks run seconds apart. "paired-autopipe" does the same
// for ratelimit-autopipe (the ratelimit-autopipe/raw metric), and
// "paired-handoff" for raw-handoff, the raw loop with its round trip
// handed to another goroutine and back (raw-handoff/raw).
func BenchmarkHandlerLone(b *testing.B) {
	tenant := []byte("tenant0")
	for _, run := range loneHandlers {
		for _, c := range run.contenders {
			b.Run(fmt.Sprintf("redis/opts=%s/%s", run.opts.name, c.name), func(b *testing.B) {
				rdb := benchRedis(b, "redis", run.opts)
				serve := loneServer(b, newApp(c.new(b, rdb, bigLimit)).Handler(), tenant)
				for range 100 { // the window, the connection, the script
					serve()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					serve()
				}
				b.StopTimer()
				reportFailOpen(b)
			})
		}
		for _, p := range []struct {
			name string
			c    handlerContender
		}{{"paired", ours}, {"paired-autopipe", oursAutoPipe}, {"paired-handoff", rawHandOff}} {
			b.Run(fmt.Sprintf("redis/opts=%s/%s", run.opts.name, p.name), func(b *testing.B) {
				servePaired(b, benchRedis(b, "redis", run.opts), p.c)
			})
		}
	}
}

// servePaired alternates a request through c and one through
// raw-multi-exec, on one client, and times each. It reports c's ns/req,
// the raw loop's and their ratio, each metric named after c
// ("ratelimit-ns/req", "ratelimit/raw").
func servePaired(b *testing.B, rdb redis.UniversalClient, c handlerContender) {
	serve := [2]func(){
		loneServer(b, newApp(c.new(b, rdb, bigLimit)).Handler(), []byte("tenant0")),
		loneServer(b, newApp(rawMultiExec.new(b, rdb, bigLimit)).Handler(), []byte("tenant1")),
	}
	for range 100 {
		serve[0]()
		serve[1]()
	}
	var (
		spent [2]time.Duration
		n     [2]int
	)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i & 1
		start := time.Now()
		serve[k]()
		spent[k] += time.Since(start)
		n[k]++
	}
	b.StopTimer()
	if n[1] == 0 {
		return // b.N is 1: nothing to compare
	}
	oursNs, rawNs := float64(spent[0])/float64(n[0]), float64(spent[1])/float64(n[1])
	b.ReportMetric(oursNs, c.name+"-ns/req")
	b.ReportMetric(rawNs, "raw-ns/req")
	b.ReportMetric(oursNs/rawNs, c.name+"/raw")
	reportFailOpen(b)
}

// loneServer returns a function that sends one request for tenant through
// h and fails b unless it is answered 200.
func loneServer(b *testing.B, h fasthttp.RequestHandler, tenant []byte) func() {
	var ctx fasthttp.RequestCtx
	return func() {
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/")
		ctx.Request.Header.SetBytesV("X-Tenant", tenant)
		h(&ctx)
		if code := ctx.Response.StatusCode(); code != fiber.StatusOK {
			b.Fatalf("status %d, want 200: %s", code, ctx.Response.Body())
		}
	}
}

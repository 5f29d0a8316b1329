package bench

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

var (
	memoryHandlers = []handlerContender{bare, noop, headersFloor, ours, oursNoHeaders, fiberLimiter, ululeMemory, sethvargo, xTimeRate}
	redisHandlers  = []handlerContender{bare, ours, oursNoHeaders, fiberLimiter, ululeRedis, redisRate, rawMultiExec}
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

// BenchmarkHandler is one allowed request per op through app.Handler(), as
// fasthttp serves a keep-alive connection: one reused RequestCtx per
// goroutine, the tenant in X-Tenant.
func BenchmarkHandler(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		contenders := memoryHandlers
		if backend == "redis" {
			contenders = redisHandlers
		}
		for _, tenants := range []int{1, 10000} {
			ids := make([][]byte, tenants)
			for i := range ids {
				ids[i] = []byte("tenant" + strconv.Itoa(i))
			}
			for _, c := range contenders {
				b.Run(fmt.Sprintf("%s/tenants=%d/%s", backend, tenants, c.name), func(b *testing.B) {
					rdb := benchRedis(b, backend)
					driveHandler(b, newApp(c.new(b, rdb, bigLimit)).Handler(), ids)
				})
			}
		}
	}
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
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		// Each goroutine walks the tenants from its own offset: a shared
		// counter bumped per op would measure that counter's cache line.
		i := int(start.Add(7919))
		for pb.Next() {
			ctx.Response.Reset()
			ctx.Request.SetRequestURI("/")
			ctx.Request.Header.SetBytesV("X-Tenant", tenants[i%len(tenants)])
			h(&ctx)
			if code := ctx.Response.StatusCode(); code != fiber.StatusOK {
				b.Errorf("status %d, want 200: %s", code, ctx.Response.Body())
				return
			}
			i++
		}
	})
}

package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// TestAccuracy fires 600 requests for one tenant at once at three replicas,
// each with its own Redis client and Fiber app, under a limit of 100 per
// minute. Only ours is asserted, on its own batcher and on go-redis's
// auto-pipelining; the peers' counts are reported.
func TestAccuracy(t *testing.T) {
	const (
		replicas = 3
		requests = 600
		limit    = 100
	)
	admin := redisClient(t, optsCtxTimeout)
	contenders := []handlerContender{ours, oursAutoPipe, fiberLimiter, ululeRedis, redisRate}
	if !hasFunctions(admin) {
		t.Logf("%s left out: the server has no FUNCTION libraries (Redis 6?)", oursAutoPipe.name)
		contenders = slices.DeleteFunc(contenders, func(c handlerContender) bool { return c.name == oursAutoPipe.name })
	}

	t.Logf("%d requests at once for one tenant over %d replicas, limit %d per minute:", requests, replicas, limit)
	t.Logf("| %-18s | %7s | %7s | %5s |", "limiter", "allowed", "refused", "other")
	t.Logf("|%s|%s|%s|%s|", "--------------------", "---------", "---------", "-------")
	for _, c := range contenders {
		if err := admin.FlushDB(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		handlers := make([]fasthttp.RequestHandler, replicas)
		for i := range handlers {
			handlers[i] = newApp(c.new(t, redisClient(t, optsCtxTimeout), limit)).Handler()
		}

		var ok, refused, other atomic.Int64
		var wg sync.WaitGroup
		release := make(chan struct{})
		for i := range requests {
			ctx := new(fasthttp.RequestCtx)
			ctx.Request.SetRequestURI("/")
			ctx.Request.Header.Set("X-Tenant", "acme")
			h := handlers[i%replicas]
			wg.Go(func() {
				<-release
				h(ctx)
				switch ctx.Response.StatusCode() {
				case fiber.StatusOK:
					ok.Add(1)
				case fiber.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		close(release)
		wg.Wait()

		t.Logf("| %-18s | %7d | %7d | %5d |", c.name, ok.Load(), refused.Load(), other.Load())
		if (c.name == ours.name || c.name == oursAutoPipe.name) && (ok.Load() != limit || other.Load() != 0) {
			t.Errorf("%s let %d through (and %d failed), want exactly %d", c.name, ok.Load(), other.Load(), limit)
		}
	}
}

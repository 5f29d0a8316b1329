package bench

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/gatewaykit/ratelimit"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// oursSkipFailed is ours (fixed window) with SkipFailedRequests: a request
// that succeeds, as every one here does, keeps its count.
var oursSkipFailed = handlerContender{"ratelimit-skipfailed", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
	return oursHandler(tb, ratelimit.Config{
		Counter: counterFor(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader, SkipFailedRequests: true,
	})
}}

// flightLimit is an InFlight limit no benchmark reaches: a tenant never
// has that many requests running at once.
const flightLimit = 1 << 20

// BenchmarkGiveBack is what giving back costs, over 10,000 tenants, in
// memory and on Redis (redisCallers goroutines on one client with
// ContextTimeoutEnabled, as the ratelimit README advises).
//
//   - fiber/...: the Fiber v2 middleware, as BenchmarkHandler drives it:
//     "ratelimit" beside "ratelimit-skipfailed", the same with
//     SkipFailedRequests. The handler answers 200, so no request is
//     given back: the row shows what the rule costs a request that
//     succeeds.
//   - take/...: the Limiter alone. "ratelimit" is one Take per op on a
//     fixed window (bigLimit per window); "ratelimit-inflight" is a Take
//     then a Release per op on an InFlight limiter (flightLimit slots, a
//     lease of a window), what a request in flight does: two calls, each
//     batched with the other callers' on Redis.
func BenchmarkGiveBack(b *testing.B) {
	ids := tenantIDs(10000)
	tenants := make([]string, len(ids))
	for i, id := range ids {
		tenants[i] = string(id)
	}
	for _, backend := range []string{"memory", "redis"} {
		group := "memory/tenants=10000"
		if backend == "redis" {
			group = "redis/opts=ctxtimeout/tenants=10000"
		}
		for _, c := range []handlerContender{ours, oursSkipFailed} {
			b.Run("fiber/"+group+"/"+c.name, func(b *testing.B) {
				rdb := benchRedis(b, backend, optsCtxTimeout)
				driveHandler(b, newApp(c.new(b, rdb, bigLimit)).Handler(), ids)
			})
		}
		b.Run("take/"+group+"/ratelimit", func(b *testing.B) {
			rdb := benchRedis(b, backend, optsCtxTimeout)
			driveTake(b, oursLimiter(b, ratelimit.Options{
				Counter: counterFor(b, rdb), Limit: bigLimit, Window: window,
			}), tenants)
		})
		b.Run("take/"+group+"/ratelimit-inflight", func(b *testing.B) {
			rdb := benchRedis(b, backend, optsCtxTimeout)
			driveTakeRelease(b, oursLimiter(b, ratelimit.Options{
				Counter: counterFor(b, rdb), Limit: flightLimit, Window: window, Algorithm: ratelimit.InFlight,
			}), tenants)
		})
	}
}

// driveTakeRelease is driveTake for a request in flight: one Take and one
// Release of what it took per op, one of each per tenant before the
// timer. It reports "releasefail", the Releases that returned an error
// (0 when all is well; a slot not given back stands until its lease
// ends), and logs the first.
func driveTakeRelease(b *testing.B, l *ratelimit.Limiter, tenants []string) {
	ctx := context.Background()
	for _, t := range tenants {
		d := l.Take(ctx, t)
		if !d.Allowed {
			b.Fatalf("tenant %s refused before the timer (by %v, err %v)", t, d.By, d.Err)
		}
		if err := l.Release(ctx, d); err != nil {
			b.Fatalf("tenant %s: release before the timer: %v", t, err)
		}
	}
	var failed atomic.Int64
	walkParallel(b, func() func(int) bool {
		return func(i int) bool {
			d := l.Take(ctx, tenants[i%len(tenants)])
			if !d.Allowed {
				b.Errorf("refused (by %v, err %v): %v", d.By, d.Err, errDenied)
				return false
			}
			if err := l.Release(ctx, d); err != nil && failed.Add(1) == 1 {
				b.Logf("release: %v", err)
			}
			return true
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(failed.Load()), "releasefail")
	reportFailOpen(b)
}

package bench

import (
	"context"
	"testing"

	"github.com/gatewaykit/ratelimit"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// twoQuotas are a UTC day's and a month's quota, with limits no benchmark
// spends: a request with them does the same allowed work as one without,
// plus the quotas' own.
var twoQuotas = []ratelimit.Quota{
	{Name: "day", Limit: 1 << 40, Calendar: ratelimit.CalendarDay},
	{Name: "month", Limit: 1 << 40, Calendar: ratelimit.CalendarMonth},
}

// oursQuotas is ours (fixed window) with twoQuotas: the headers list three
// limits.
var oursQuotas = handlerContender{"ratelimit-quotas", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
	return oursHandler(tb, ratelimit.Config{
		Counter: counterFor(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader, Quotas: twoQuotas,
	})
}}

// BenchmarkQuotas is what two quotas add to a request: in each group,
// "ratelimit" is the main limit alone (bigLimit per window) and
// "ratelimit-quotas" the same with twoQuotas, one allowed request per op
// over 10,000 tenants.
//
//   - take/...: Limiter.Take, no HTTP; in memory on a MemoryCounter, on
//     Redis from redisCallers goroutines on one client (ContextTimeoutEnabled,
//     as the ratelimit README advises).
//   - fiber/...: the Fiber v2 middleware, as BenchmarkHandler drives it,
//     header fields on; in memory beside the bare app.
func BenchmarkQuotas(b *testing.B) {
	ids := tenantIDs(10000)
	tenants := make([]string, len(ids))
	for i, id := range ids {
		tenants[i] = string(id)
	}
	variants := []struct {
		name   string
		quotas []ratelimit.Quota
	}{{"ratelimit", nil}, {"ratelimit-quotas", twoQuotas}}
	for _, backend := range []string{"memory", "redis"} {
		group := "memory/tenants=10000"
		if backend == "redis" {
			group = "redis/opts=ctxtimeout/tenants=10000"
		}
		for _, v := range variants {
			b.Run("take/"+group+"/"+v.name, func(b *testing.B) {
				rdb := benchRedis(b, backend, optsCtxTimeout)
				driveTake(b, oursLimiter(b, ratelimit.Options{
					Counter: counterFor(b, rdb), Limit: bigLimit, Window: window, Quotas: v.quotas,
				}), tenants)
			})
		}
		contenders := []handlerContender{ours, oursQuotas}
		if backend == "memory" {
			contenders = append([]handlerContender{bare}, contenders...)
		}
		for _, c := range contenders {
			b.Run("fiber/"+group+"/"+c.name, func(b *testing.B) {
				rdb := benchRedis(b, backend, optsCtxTimeout)
				driveHandler(b, newApp(c.new(b, rdb, bigLimit)).Handler(), ids)
			})
		}
	}
}

// driveTake is driveHandler for a Limiter alone: one Take per op, the
// tenants walked from each goroutine's own offset, after one Take per
// tenant before the timer so that the timed ones find live windows.
func driveTake(b *testing.B, l *ratelimit.Limiter, tenants []string) {
	ctx := context.Background()
	for _, t := range tenants {
		if d := l.Take(ctx, t); !d.Allowed {
			b.Fatalf("tenant %s refused before the timer (by %v, err %v)", t, d.By, d.Err)
		}
	}
	walkParallel(b, func() func(int) bool {
		return func(i int) bool {
			if d := l.Take(ctx, tenants[i%len(tenants)]); !d.Allowed {
				b.Errorf("refused (by %v, err %v): %v", d.By, d.Err, errDenied)
				return false
			}
			return true
		}
	})
	b.StopTimer()
	reportFailOpen(b)
}

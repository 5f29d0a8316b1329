package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/gatewaykit/ratelimit"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// A takeContender makes one decision for a tenant per call, as
// Limiter.Take does, and fails when it denies; rdb is nil in memory.
type takeContender struct {
	name string
	new  func(tb testing.TB, rdb *redis.Client) func(ctx context.Context, tenant string) error
}

// oursTake is a Limiter of algo (bigLimit per window; a TokenBucket's
// Burst is the limit) called by Take.
func oursTake(name string, algo ratelimit.Algorithm) takeContender {
	return takeContender{name, func(tb testing.TB, rdb *redis.Client) func(context.Context, string) error {
		opts := ratelimit.Options{Counter: counterFor(tb, rdb), Limit: bigLimit, Window: window, Algorithm: algo}
		if algo == ratelimit.TokenBucket {
			opts.Burst = bigLimit
		}
		l := oursLimiter(tb, opts)
		return func(ctx context.Context, tenant string) error {
			// A request let through uncounted (failing open) is allowed,
			// as in driveTake: reportFailOpen counts those.
			if d := l.Take(ctx, tenant); !d.Allowed {
				return fmt.Errorf("refused (by %v, err %v): %w", d.By, d.Err, errDenied)
			}
			return nil
		}
	}}
}

var (
	bucketMemory = []takeContender{
		oursTake("ratelimit", ratelimit.FixedWindow),
		oursTake("ratelimit-tokenbucket", ratelimit.TokenBucket),
		{"x-time-rate", func(testing.TB, *redis.Client) func(context.Context, string) error {
			m := newRateMap(bigLimit)
			return func(_ context.Context, tenant string) error { return allowed(m.allow("rl:"+tenant), nil) }
		}},
		{"sethvargo-memorystore", func(tb testing.TB, _ *redis.Client) func(context.Context, string) error {
			s := newSethvargo(tb, bigLimit)
			return func(ctx context.Context, tenant string) error {
				_, _, _, ok, err := s.Take(ctx, "rl:"+tenant)
				return allowed(ok, err)
			}
		}},
	}
	bucketRedis = []takeContender{
		oursTake("ratelimit", ratelimit.FixedWindow),
		oursTake("ratelimit-tokenbucket", ratelimit.TokenBucket),
		{"redis-rate", func(_ testing.TB, rdb *redis.Client) func(context.Context, string) error {
			l, lim := redis_rate.NewLimiter(rdb), redisRateLimit(bigLimit)
			return func(ctx context.Context, tenant string) error {
				res, err := l.Allow(ctx, "rl:"+tenant, lim)
				return allowed(err == nil && res.Allowed > 0, err)
			}
		}},
	}
)

// BenchmarkTokenBucket is what a token bucket costs beside a fixed window:
// one allowed decision per op over 10,000 tenants, no HTTP.
// "ratelimit" is a Limiter on a fixed window (bigLimit per window),
// "ratelimit-tokenbucket" one with Algorithm TokenBucket, the same Limit
// and Window, Burst the limit (GCRA: one key per tenant holding its
// theoretical arrival time), both called by Take.
//
//   - memory/...: on a MemoryCounter, beside two token buckets in memory,
//     x-time-rate (a rate.Limiter per key behind one mutex) and
//     sethvargo-memorystore.
//   - redis/...: redisCallers goroutines on one client with
//     ContextTimeoutEnabled, as the ratelimit README advises, beside
//     redis-rate (go-redis/redis_rate's GCRA script, the same rate and
//     burst) on the same Redis.
func BenchmarkTokenBucket(b *testing.B) {
	ids := tenantIDs(10000)
	tenants := make([]string, len(ids))
	for i, id := range ids {
		tenants[i] = string(id)
	}
	for _, backend := range []string{"memory", "redis"} {
		group, contenders := "memory/tenants=10000", bucketMemory
		if backend == "redis" {
			group, contenders = "redis/opts=ctxtimeout/tenants=10000", bucketRedis
		}
		for _, c := range contenders {
			b.Run(group+"/"+c.name, func(b *testing.B) {
				rdb := benchRedis(b, backend, optsCtxTimeout)
				driveDecide(b, c.new(b, rdb), tenants)
			})
		}
	}
}

// driveDecide is driveTake for any contender: one decision per op, the
// tenants walked from each goroutine's own offset, after one decision per
// tenant before the timer so that the timed ones find live keys.
func driveDecide(b *testing.B, decide func(context.Context, string) error, tenants []string) {
	ctx := context.Background()
	for _, t := range tenants {
		if err := decide(ctx, t); err != nil {
			b.Fatalf("tenant %s before the timer: %v", t, err)
		}
	}
	walkParallel(b, func() func(int) bool {
		return func(i int) bool {
			if err := decide(ctx, tenants[i%len(tenants)]); err != nil {
				b.Error(err)
				return false
			}
			return true
		}
	})
	b.StopTimer()
	reportFailOpen(b)
}

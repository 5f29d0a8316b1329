package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/gatewaykit/ratelimit"
	"github.com/go-redis/redis_rate/v10"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
)

// A counterContender makes one decision for key, and fails when it denies.
type counterContender struct {
	name string
	new  func(tb testing.TB, rdb *redis.Client) func(ctx context.Context, key string) error
}

var memoryCounters = []counterContender{
	{"ratelimit", func(tb testing.TB, _ *redis.Client) func(context.Context, string) error {
		m := ratelimit.NewMemoryCounter()
		tb.Cleanup(func() { m.Close() })
		return func(ctx context.Context, key string) error {
			_, err := m.Incr(ctx, key, window)
			return err
		}
	}},
	{"sethvargo-memorystore", func(tb testing.TB, _ *redis.Client) func(context.Context, string) error {
		s := newSethvargo(tb, bigLimit)
		return func(ctx context.Context, key string) error {
			_, _, _, ok, err := s.Take(ctx, key)
			return allowed(ok, err)
		}
	}},
	{"x-time-rate", func(testing.TB, *redis.Client) func(context.Context, string) error {
		m := newRateMap(bigLimit)
		return func(_ context.Context, key string) error { return allowed(m.allow(key), nil) }
	}},
	{"ulule-memory", func(testing.TB, *redis.Client) func(context.Context, string) error {
		l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: window, Limit: bigLimit})
		return func(ctx context.Context, key string) error {
			lc, err := l.Get(ctx, key)
			return allowed(!lc.Reached, err)
		}
	}},
}

var redisCounters = []counterContender{
	{"ratelimit", func(_ testing.TB, rdb *redis.Client) func(context.Context, string) error {
		c := ratelimit.NewRedisCounter(rdb)
		return func(ctx context.Context, key string) error {
			_, err := c.Incr(ctx, key, window)
			return err
		}
	}},
	{"raw-multi-exec", func(_ testing.TB, rdb *redis.Client) func(context.Context, string) error {
		return func(ctx context.Context, key string) error {
			_, err := rawIncr(ctx, rdb, key)
			return err
		}
	}},
	{"redis-rate", func(_ testing.TB, rdb *redis.Client) func(context.Context, string) error {
		l, lim := redis_rate.NewLimiter(rdb), redisRateLimit(bigLimit)
		return func(ctx context.Context, key string) error {
			res, err := l.Allow(ctx, key, lim)
			return allowed(err == nil && res.Allowed > 0, err)
		}
	}},
	{"ulule-redis", func(tb testing.TB, rdb *redis.Client) func(context.Context, string) error {
		l := newUluleRedis(tb, rdb, bigLimit)
		return func(ctx context.Context, key string) error {
			lc, err := l.Get(ctx, key)
			return allowed(!lc.Reached, err)
		}
	}},
	{"gofiber-storage-get-set", func(_ testing.TB, rdb *redis.Client) func(context.Context, string) error {
		s := &fiberStorageCounter{s: fiberredis.NewFromConnection(rdb)}
		return func(ctx context.Context, key string) error {
			_, err := s.incr(ctx, key)
			return err
		}
	}},
}

func allowed(ok bool, err error) error {
	if err != nil {
		return err
	}
	if !ok {
		return errDenied
	}
	return nil
}

// fiberStorageCounter is what Fiber's limiter does with a Storage: one
// process-wide mutex held across a GET and a SET. Fiber stores a msgp
// record; a decimal count costs the same round trips.
type fiberStorageCounter struct {
	mu sync.Mutex
	s  *fiberredis.Storage
}

func (f *fiberStorageCounter) incr(ctx context.Context, key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	raw, err := f.s.GetWithContext(ctx, key)
	if err != nil {
		return 0, err
	}
	n, _ := strconv.ParseInt(string(raw), 10, 64) // a missing key reads as 0
	n++
	return n, f.s.SetWithContext(ctx, key, strconv.AppendInt(nil, n, 10), window)
}

// BenchmarkCounter is one allowed decision per op on a bare counter, no
// HTTP. Redis contenders run redisCallers goroutines on one client.
func BenchmarkCounter(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		contenders := memoryCounters
		if backend == "redis" {
			contenders = redisCounters
		}
		for _, n := range []int{1, 10000} {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "rl:tenant" + strconv.Itoa(i)
			}
			for _, c := range contenders {
				b.Run(fmt.Sprintf("%s/keys=%d/%s", backend, n, c.name), func(b *testing.B) {
					// No call here carries a deadline, so the options variant
					// makes no difference.
					rdb := benchRedis(b, backend, optsCtxTimeout)
					decide := c.new(b, rdb)
					ctx := context.Background()
					for _, key := range keys { // live windows, as in handler_test.go
						if err := decide(ctx, key); err != nil {
							b.Fatal(err)
						}
					}
					walkParallel(b, func() func(int) bool {
						return func(i int) bool {
							if err := decide(ctx, keys[i%len(keys)]); err != nil {
								b.Error(err)
								return false
							}
							return true
						}
					})
				})
			}
		}
	}
}

// newKeysBound is how many windows BenchmarkCounterNewKeys' counters hold
// before the timer: 256 shards of 1,024, as many shards as the default
// bound has.
const newKeysBound = 1 << 18

// BenchmarkCounterNewKeys is a stream of new keys, one per op, on a
// MemoryCounter filled with newKeysBound windows before the timer.
// "ratelimit" is held at that bound (MaxKeys), so that every op makes room
// for its key: a batch of evictions in a shard once per eighth of its
// share. "ratelimit-growing" has a bound the run never meets, so that its
// tables grow instead, as every MemoryCounter's did before it had a bound.
// Each goroutine writes keys of its own into a buffer of its own (no
// formatting); it reports evictions per op.
func BenchmarkCounterNewKeys(b *testing.B) {
	for _, c := range []struct {
		name    string
		maxKeys int
	}{{"ratelimit", newKeysBound}, {"ratelimit-growing", math.MaxInt}} {
		b.Run("memory/"+c.name, func(b *testing.B) {
			m := ratelimit.NewMemoryCounter(ratelimit.MaxKeys(c.maxKeys))
			b.Cleanup(func() { m.Close() })
			ctx := context.Background()
			for i := range newKeysBound {
				if _, err := m.Incr(ctx, "rl:full"+strconv.Itoa(i), window); err != nil {
					b.Fatal(err)
				}
			}
			evicted := m.Evicted()
			var streams atomic.Uint32
			walkParallel(b, func() func(int) bool {
				key := []byte("rl:new:gggg:iiiiiiii") // the goroutine's stream, then i
				binary.BigEndian.PutUint32(key[7:], streams.Add(1))
				return func(i int) bool {
					binary.BigEndian.PutUint64(key[12:], uint64(i))
					// The counter copies a key it keeps.
					if _, err := m.Incr(ctx, unsafe.String(&key[0], len(key)), window); err != nil {
						b.Error(err)
						return false
					}
					return true
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(m.Evicted()-evicted)/float64(b.N), "evicted/op")
		})
	}
}

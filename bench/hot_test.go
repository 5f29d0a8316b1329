package bench

import (
	"bufio"
	"context"
	"math/bits"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/redis/go-redis/v9"
)

const (
	// hotReplicas limiters in one process share one tenant, hotTenant,
	// whose budget, hotLimit a window, no run spends.
	hotReplicas = 3
	hotLimit    = 1 << 50
	hotTenant   = "hot"

	// timeEvery: each goroutine times one Take in timeEvery. Reading the
	// clock twice costs about a fifth of a decision from a block on a
	// slow VM (some 80 ns); one decision in 8, a fortieth.
	timeEvery = 8
)

// BenchmarkHotTenant is one tenant hot on every replica: hotReplicas
// limiters in one process, each with its own go-redis client (a pool of
// redisCallers, ContextTimeoutEnabled) on the same Redis, and
// redisCallers goroutines calling each (192 in all when GOMAXPROCS
// divides that), every op one Limiter.Take of hotTenant on a fixed
// window of hotLimit a minute, which never refuses; b.N decisions in
// all. "ratelimit" is without leases, "ratelimit-leases" the same with
// Options.Leases: a tenant hot on a replica is decided from blocks of
// its budget claimed from Redis in one Take each.
//
// Beside ns/op it reports, over the timed decisions: cmds/decision, the
// Redis commands they cost, from INFO commandstats before and after
// (every call, a script's own commands included); redis-us/decision, the
// microseconds Redis spent on them by the same lines, summed (a script's
// time includes its commands', which count again in their own lines);
// decisions/s; p50-ns and p99-ns, the median and the 99th percentile of
// the time of one Take as its caller saw it (one in timeEvery of each
// goroutine's, into a histogram of its own, within 3 %); failopen, as
// the other benchmarks, summed over the replicas; and with leases
// decisions/block, the decisions per block claimed.
func BenchmarkHotTenant(b *testing.B) {
	for _, c := range []struct {
		name   string
		leases bool
	}{{"ratelimit", false}, {"ratelimit-leases", true}} {
		b.Run("redis/opts=ctxtimeout/replicas=3/"+c.name, func(b *testing.B) {
			admin := benchRedis(b, "redis", optsCtxTimeout)
			limiters := make([]*ratelimit.Limiter, hotReplicas)
			metrics := make([]*ratelimit.Metrics, hotReplicas)
			ctx := context.Background()
			for i := range limiters {
				metrics[i] = new(ratelimit.Metrics)
				limiters[i] = ratelimit.NewLimiter(ratelimit.Options{
					Counter: ratelimit.NewRedisCounter(redisClient(b, optsCtxTimeout)),
					Limit:   hotLimit, Window: window, Leases: c.leases, Metrics: metrics[i],
				})
				// The window exists before the timer, as in the other
				// benchmarks.
				if d := limiters[i].Take(ctx, hotTenant); !d.Allowed {
					b.Fatalf("replica %d refused before the timer (by %v, err %v)", i, d.By, d.Err)
				}
			}
			gomaxprocs := runtime.GOMAXPROCS(0)
			b.SetParallelism(max(1, (hotReplicas*redisCallers+gomaxprocs-1)/gomaxprocs))

			var (
				next atomic.Int64 // the replica of the next goroutine, mod hotReplicas
				mu   sync.Mutex
				all  latencies
			)
			before := redisWork(b, admin)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				l := limiters[int(next.Add(1)-1)%hotReplicas]
				h := new(latencies)
				for i := 0; pb.Next(); i++ {
					var d ratelimit.Decision
					if i%timeEvery == 0 {
						start := time.Now()
						d = l.Take(ctx, hotTenant)
						h.add(time.Since(start))
					} else {
						d = l.Take(ctx, hotTenant)
					}
					if !d.Allowed {
						b.Errorf("refused (by %v, err %v): %v", d.By, d.Err, errDenied)
						break
					}
				}
				mu.Lock()
				all.merge(h)
				mu.Unlock()
			})
			b.StopTimer()
			after := redisWork(b, admin)

			n := float64(b.N)
			b.ReportMetric(float64(after.calls-before.calls)/n, "cmds/decision")
			b.ReportMetric(float64(after.usec-before.usec)/n, "redis-us/decision")
			b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(all.quantile(0.5)), "p50-ns")
			b.ReportMetric(float64(all.quantile(0.99)), "p99-ns")
			var sum ratelimit.MetricsSnapshot
			for _, m := range metrics {
				s := m.Snapshot()
				sum.FailedOpen += s.FailedOpen
				sum.LeaseBlocks += s.LeaseBlocks
			}
			b.ReportMetric(float64(sum.FailedOpen), "failopen")
			if sum.FailedOpen > 0 {
				b.Logf("ratelimit failed open on %d of %d decisions (the counter did not answer in time, or failed)", sum.FailedOpen, b.N)
			}
			if c.leases && sum.LeaseBlocks > 0 {
				b.ReportMetric(n/float64(sum.LeaseBlocks), "decisions/block")
			}
		})
	}
}

// A work is what Redis has done since it started (or its last CONFIG
// RESETSTAT), by INFO commandstats.
type work struct{ calls, usec int64 }

// redisWork sums every command's calls and usec in INFO commandstats:
// the commands a script or a MULTI/EXEC runs count in their own lines as
// well as in the EVALSHA's or EXEC's (whose time includes theirs). INFO
// is left out, so that two readings differ by what ran between them.
func redisWork(b *testing.B, rdb *redis.Client) (w work) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_evalsha:calls=3,usec=27,usec_per_call=9.00,...
		name, fields, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			var into *int64
			switch k {
			case "calls":
				into = &w.calls
			case "usec":
				into = &w.usec
			default:
				continue
			}
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("INFO commandstats: %s: %s: %v", name, k, err)
			}
			*into += x
		}
	}
	return w
}

// latencies is a histogram of durations in nanoseconds, log-linear: below
// 32 ns one bucket a nanosecond, above 16 buckets to each power of two,
// so that a bucket's middle is within 1/32 of what fell into it.
type latencies [64 * 16]uint64

// bucket is the bucket of ns: its top five bits, and how far they were
// shifted.
func bucket(ns uint64) int {
	shift := max(0, bits.Len64(ns)-5)
	return shift*16 + int(ns>>shift)
}

// middle is the middle of bucket i.
func middle(i int) uint64 {
	if i < 32 {
		return uint64(i)
	}
	shift := i/16 - 1
	low := uint64(i%16+16) << shift
	return low + 1<<shift/2
}

func (h *latencies) add(d time.Duration) { h[bucket(uint64(max(d, 0)))]++ }

func (h *latencies) merge(o *latencies) {
	for i, n := range o {
		h[i] += n
	}
}

// quantile is the middle of the bucket that holds the q quantile (0.5:
// the median), 0 for no sample.
func (h *latencies) quantile(q float64) uint64 {
	var total uint64
	for _, n := range h {
		total += n
	}
	var seen uint64
	for i, n := range h {
		if seen += n; n > 0 && float64(seen) >= q*float64(total) {
			return middle(i)
		}
	}
	return 0
}

// Every duration's bucket has a middle within 1/32 of it, and the median
// of a histogram is its middle sample's.
func TestLatencies(t *testing.T) {
	for _, ns := range []uint64{0, 1, 31, 32, 33, 63, 64, 100, 999, 1000, 12345, 1 << 40, 1<<63 + 12345} {
		i := bucket(ns)
		if i < 0 || i >= len(latencies{}) {
			t.Fatalf("bucket(%d) = %d, out of range", ns, i)
		}
		m := middle(i)
		if d := max(m, ns) - min(m, ns); d*32 > ns {
			t.Errorf("bucket(%d) = %d, whose middle %d is off by %d", ns, i, m, d)
		}
	}
	var h latencies
	for _, d := range []time.Duration{100, 200, 300, 40000, 50000} {
		h.add(d)
	}
	if m := h.quantile(0.5); m < 290 || m > 310 {
		t.Errorf("median of 100, 200, 300, 40000, 50000 ns = %d, want about 300", m)
	}
	if m := h.quantile(0.99); m < 48500 || m > 51500 {
		t.Errorf("99th percentile of 100, 200, 300, 40000, 50000 ns = %d, want about 50000", m)
	}
}

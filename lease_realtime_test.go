package ratelimit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// BenchmarkLeasesInRealTime: three replicas with Options.Leases on one
// Redis (a single node, a cluster), one tenant limited to 200 a second,
// fixed windows, on the real clock for 10 s. Each load is callers
// goroutines in all, spread over the replicas, each sending one request
// every period; "steady" starts them apart, "in-step" together, so that
// a replica sees callers/3 requests at once. It reports what the full
// seconds allowed: the fewest and the most (every second must stay at
// 200 or under; leases should leave no second under 194, 97 %), and the
// blocks claimed, which say whether the tenant went hot at all. It runs
// once whatever b.N is: the figures are of the 10 s, not per op.
//
//	go test -run '^$' -bench LeasesInRealTime -benchtime 1x .
func BenchmarkLeasesInRealTime(b *testing.B) {
	const limit, seconds = 200, 10
	for _, s := range []struct {
		name   string
		client func(b *testing.B) redis.UniversalClient
	}{
		{"single", func(b *testing.B) redis.UniversalClient { return redis.NewClient(redistest.Options(b)) }},
		{"cluster", func(b *testing.B) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(b)})
		}},
	} {
		for _, load := range []struct {
			name    string
			callers int
			period  time.Duration
			inStep  bool
		}{
			{"steady-2x", 12, 30 * time.Millisecond, false},
			{"in-step-2x", 12, 30 * time.Millisecond, true},
			{"in-step-4x", 24, 30 * time.Millisecond, true},
			{"in-step-6x", 36, 30 * time.Millisecond, true},
		} {
			b.Run(s.name+"/"+load.name, func(b *testing.B) {
				name := "leases-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				lims := make([]*Limiter, 3)
				ms := make([]*Metrics, 3)
				for i := range lims {
					rdb := s.client(b)
					b.Cleanup(func() { rdb.Close() })
					ms[i] = new(Metrics)
					lims[i] = NewLimiter(Options{Counter: NewRedisCounter(rdb), Name: name, Limit: limit, Window: time.Second,
						Leases: true, Metrics: ms[i], StoreTimeout: time.Second})
					if err := lims[i].Ping(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				// The run starts on a second of the clock, so that its
				// seconds are the fixed windows' (Redis's clock is this
				// machine's).
				start := time.Now().Truncate(time.Second).Add(time.Second)
				end := start.Add(seconds * time.Second)
				allowed := make([]atomic.Int64, seconds)
				var over atomic.Int64
				var wg sync.WaitGroup
				for c := range load.callers {
					lim := lims[c%3]
					first := start
					if !load.inStep {
						first = start.Add(time.Duration(c) * load.period / time.Duration(load.callers))
					}
					wg.Go(func() {
						time.Sleep(time.Until(first))
						t := time.NewTicker(load.period)
						defer t.Stop()
						for now := time.Now(); now.Before(end); now = <-t.C {
							d := lim.Take(context.Background(), "acme")
							if !d.Allowed {
								continue
							}
							if d.By != ByCounter {
								over.Add(1)
							}
							// Counted in the window it was decided in,
							// by when the decision says that window
							// ends: a request decided just before a
							// second's end may return after it.
							ends := time.Now().Add(d.Reset).Sub(start).Seconds()
							if i := int(math.Round(ends)) - 1; i >= 0 && i < seconds {
								allowed[i].Add(1)
							}
						}
					})
				}
				wg.Wait()
				per := make([]int64, seconds)
				for i := range per {
					per[i] = allowed[i].Load()
				}
				var blocks, expired uint64
				for _, m := range ms {
					s := m.Snapshot()
					blocks, expired = blocks+s.LeaseBlocks, expired+s.LeaseUnitsExpired
				}
				if over.Load() > 0 {
					b.Errorf("%d requests allowed by something other than the counter (failed open?)", over.Load())
				}
				// The first and last seconds hold requests decided just
				// across their edges; the full seconds are those between.
				full := per[1 : seconds-1]
				b.ReportMetric(float64(slices.Min(full)), "min-allowed/s")
				b.ReportMetric(float64(slices.Max(full)), "max-allowed/s")
				b.ReportMetric(float64(blocks), "blocks")
				b.ReportMetric(float64(expired), "units-expired")
				b.Logf("allowed by second: %s", strings.Trim(fmt.Sprint(per), "[]"))
				if slices.Max(full) > limit {
					b.Errorf("a second allowed %d, more than the limit, %d", slices.Max(full), limit)
				}
			})
		}
	}
}

// What the instruments cost a decision: nothing on a MemoryCounter, whose
// calls are not timed; on another store, the histogram's record of each
// round trip.

package ratelimitotel

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
)

// oneCounter is a Counter that counts nothing and answers 1 at once: a
// store whose round trips the limiter times, as for Redis, with no
// network, lock or map of its own to measure.
type oneCounter struct{}

func (oneCounter) Incr(context.Context, string, time.Duration) (int64, error) { return 1, nil }

// decisionCase is a limiter set up as a benchmark or test case says: on a
// MemoryCounter or on oneCounter, counted or not in a Metrics, exported
// or not by Instruments.
type decisionCase struct {
	name          string
	timed         bool // on oneCounter, whose round trips are timed
	metrics, otel bool
}

var decisionCases = []decisionCase{
	{"memory/none", false, false, false},
	{"memory/metrics", false, true, false},
	{"memory/metrics+otel", false, true, true},
	{"counter/none", true, false, false},
	{"counter/metrics", true, true, false},
	{"counter/metrics+otel", true, true, true},
}

// limiter returns the case's limiter, with a budget that no run spends.
func (c decisionCase) limiter(t testing.TB) *ratelimit.Limiter {
	opts := ratelimit.Options{Limit: 1 << 40, Window: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	if c.timed {
		opts.Counter = ratelimit.CounterStore(oneCounter{})
	}
	if c.metrics {
		opts.Metrics = new(ratelimit.Metrics)
	}
	if c.otel {
		in, _ := newInstruments(t)
		in.Add("global", opts.Metrics)
	}
	return ratelimit.NewLimiter(opts)
}

// BenchmarkDecision is the time and the allocations of a decision, with
// and without a Metrics and the instruments, on 10,000 tenants.
func BenchmarkDecision(b *testing.B) {
	tenants := make([]string, 10000)
	for i := range tenants {
		tenants[i] = "tenant" + strconv.Itoa(i)
	}
	for _, c := range decisionCases {
		b.Run(c.name, func(b *testing.B) {
			lim := c.limiter(b)
			ctx := context.Background()
			var start atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(start.Add(7919)) // a prime stride keeps goroutines apart
				for pb.Next() {
					if d := lim.Take(ctx, tenants[i%len(tenants)]); !d.Allowed {
						b.Fatalf("refused: %+v", d)
					}
					i++
				}
			})
		})
	}
}

// The instruments add no allocation to a decision: none on a
// MemoryCounter, and no more than a Metrics alone on a timed store.
func TestDecisionAllocations(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	allocs := map[string]float64{}
	for _, c := range decisionCases {
		lim := c.limiter(t)
		ctx := context.Background()
		lim.Take(ctx, "acme") // the tenant's window, made once
		allocs[c.name] = testing.AllocsPerRun(200, func() { lim.Take(ctx, "acme") })
	}
	if n := allocs["memory/metrics+otel"]; n != 0 {
		t.Errorf("on a MemoryCounter: %.1f allocations a decision with the instruments, want none", n)
	}
	if with, without := allocs["counter/metrics+otel"], allocs["counter/metrics"]; with != without {
		t.Errorf("on a timed store: %.1f allocations a decision with the instruments, %.1f without", with, without)
	}
}

package ratelimit

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"
)

// A request decided in memory allocates nothing, whatever the limiter
// counts: the doors' own tests (door_giveback_test.go) add the doors. Each
// path below allocated nothing before the store seam, and must not after.
func TestMemoryPathsAllocateNothing(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	ctx := context.Background()
	quotas := []Quota{{Name: "minute", Limit: 1 << 40, Window: time.Minute}, {Name: "month", Limit: 1 << 40, Calendar: CalendarMonth}}
	plans := func(tenant string) Plan { return Plan{Limit: 1 << 41, Window: 2 * time.Hour} }
	planQuotas := func(tenant string) Plan { return Plan{Quotas: quotas} }
	addr := netip.MustParseAddr("2001:db8::1")
	for _, c := range []struct {
		name string
		opts Options
		run  func(lim *Limiter)
	}{
		{"fixed Take", Options{}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"fixed TakeN", Options{}, func(lim *Limiter) { lim.TakeN(ctx, "acme", 3) }},
		{"fixed TakeAddr", Options{}, func(lim *Limiter) { lim.TakeAddr(ctx, addr) }},
		{"fixed Take without a tenant", Options{}, func(lim *Limiter) { lim.Take(ctx, "") }},
		{"fixed Take and Release", Options{}, func(lim *Limiter) { _ = lim.Release(ctx, lim.Take(ctx, "acme")) }},
		{"fixed Take with plans", Options{PlanFor: plans}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"fixed Take, shadow", Options{Shadow: true}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"sliding Take", Options{Algorithm: SlidingWindow}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"sliding TakeN and Release", Options{Algorithm: SlidingWindow}, func(lim *Limiter) { _ = lim.Release(ctx, lim.TakeN(ctx, "acme", 2)) }},
		{"quotas Take", Options{Quotas: quotas}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"quotas Take and Release", Options{Quotas: quotas}, func(lim *Limiter) { _ = lim.Release(ctx, lim.Take(ctx, "acme")) }},
		{"plan quotas Take", Options{PlanFor: planQuotas}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"sliding quotas Take", Options{Algorithm: SlidingWindow, Quotas: quotas}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"in flight Take and Release", Options{Algorithm: InFlight}, func(lim *Limiter) { _ = lim.Release(ctx, lim.Take(ctx, "acme")) }},
		{"bucket Take", Options{Algorithm: TokenBucket}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"bucket TakeN and Settle", Options{Algorithm: TokenBucket}, func(lim *Limiter) { _ = lim.Settle(ctx, lim.TakeN(ctx, "acme", 2), 5) }},
		{"bucket quotas Take", Options{Algorithm: TokenBucket, Quotas: quotas}, func(lim *Limiter) { lim.Take(ctx, "acme") }},
		{"bucket Wait", Options{Algorithm: TokenBucket}, func(lim *Limiter) { _, _ = lim.Wait(ctx, "acme") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.Limit, opts.Window = 1<<40, time.Hour
			opts.Logger = slog.New(slog.DiscardHandler)
			lim := NewLimiter(opts)
			c.run(lim) // the tenant's window, made once
			if n := testing.AllocsPerRun(200, func() { c.run(lim) }); n != 0 {
				t.Errorf("%.1f allocations a call, want none", n)
			}
		})
	}
}

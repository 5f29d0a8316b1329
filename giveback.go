package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gatewaykit/ratelimit/store"
)

// GiveBack gives back n units that tenant spent, when the gateway learns
// that it overcharged after the Decision is gone: a request of another
// process, such as Envoy's negative hits. It gives back in the windows
// now running of every limit of the tenant's plan, the main one and each
// quota, never below nothing spent, as Settle does for a Decision made
// now: a window that starts after the store read which ones run is left
// alone. For a TokenBucket it pulls the bucket's theoretical arrival time
// earlier, never before now.
//
// It reads the store, then gives back: two calls, each within
// Options.StoreTimeout. n of 0 does nothing; below 0 is an error, and so
// is an InFlight limiter, whose slots Release gives back. A store failure,
// of the read or the give-back, is logged as Settle logs one and returned.
// GiveBack needs stores that give back and decide costs.
func (l *Limiter) GiveBack(ctx context.Context, tenant string, n int) error {
	switch {
	case n < 0:
		return fmt.Errorf("ratelimit: GiveBack: n %d is below 0", n)
	case l.opts.Algorithm == InFlight:
		return fmt.Errorf("ratelimit: GiveBack of an InFlight limiter, which holds slots, not costs: Release the Decision")
	case n == 0:
		return nil
	}
	if lack := l.lacks("GiveBack needs", store.GiveBack|store.Costs, true); lack != nil {
		return fmt.Errorf("ratelimit: %w", lack)
	}
	// A read, of cost 0, learns which windows run and the tenant's plan;
	// a Decision of cost n in them gives n back through Settle.
	r := l.newRequest(tenant, l.clock.mono())
	defer r.free()
	if l.opts.PlanFor != nil {
		l.planned(r)
	}
	r.onCalendar(l.clock)
	res, err := l.read(ctx, r)
	if err != nil {
		if !errors.Is(err, ErrContextDone) && ctx.Err() == nil && !isBreakerOpen(err) {
			l.failures.Record(slog.LevelError, "ratelimit: counter failed to read the windows to give back in; nothing was given back",
				slog.String("tenant", logTenant(tenant)), slog.String("key", string(r.Key)), slog.Any("err", err))
		}
		return fmt.Errorf("ratelimit: GiveBack: reading tenant %s: %w", logTenant(tenant), err)
	}
	d := Decision{tenant: tenant, policy: &l.policy, plan: r.plan, took: true, cost: int64(n)}
	for j := range res.Counts {
		d.marks[j] = res.Counts[j].Mark
	}
	return l.Settle(ctx, d, 0)
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gatewaykit/ratelimit/store"
)

// Settling: a request's cost is spent when it is decided, but what a
// gateway charges is often known only when the response is written (the
// tokens an upstream used, Config.CostAfter; Config.SkipFailedRequests),
// a later limiter on the same request may refuse it, and a request in
// flight holds its slots until it ends. Settle sets what one Decision
// took to the cost it turned out to have, in the windows it was counted
// in, which the Decision names by the marks its store gave them (see
// store.Count.Mark); Release gives all of it back. The store is told the
// difference as a request whose Cost is what it gives back, negative for
// a charge (see store.Store's Give).

// Settle sets the cost of the request that d decided to cost, the cost
// its response showed. The difference from the cost d was decided with
// is charged (cost above it) or given back (cost below it). That happens
// in every limit d was counted in, the main one and each quota, and only
// while their windows are still the ones it was counted in. A window that
// has ended is left alone, and nothing is charged or given back in a
// window that came after it. A charge goes past the limit if need be: the tenant's
// next requests are then refused until its budget covers the debt, in a
// fixed window until the next window, in a sliding window until the
// weighted count has fallen enough, in a calendar quota until its next
// period. For a TokenBucket, a charge pushes the bucket's theoretical
// arrival time later and a give-back pulls it earlier, never before now.
//
// It is a no-op, returning nil, for a decision that took nothing:
// refused, shadowed, decided by the over-limit cache or by nothing; and
// for a cost equal to d's. A cost below 0 is an error. An InFlight
// limiter holds slots, not costs: Settle to 0 gives them back, as Release
// does, and any other cost is an error.
//
// Settle each decision once: d carries the cost it was decided with, so a
// second Settle of the same Decision applies its difference again. d must
// be this limiter's. ctx bounds the wait, within Options.StoreTimeout; a
// request's middleware settles with the request's values but not its
// cancellation. A store failure is logged as any other and returned, and
// the count stands as decided: a window's until it ends, a slot until its
// lease does. Settle needs stores that give back: a CounterStore can
// neither give back nor charge.
func (l *Limiter) Settle(ctx context.Context, d Decision, cost int) error {
	switch {
	case cost < 0:
		return fmt.Errorf("ratelimit: Settle: cost %d is below 0", cost)
	case cost != 0 && l.opts.Algorithm == InFlight:
		return fmt.Errorf("ratelimit: Settle: cost %d of an InFlight limiter, which holds slots, not costs: settle it to 0 (Release)", cost)
	case !d.took || int64(cost) == d.cost:
		return nil
	}
	// The store that decided d: the counter, or the fallback.
	s, has, field, c := l.store, l.features, "Counter", l.opts.Counter
	switch d.policy {
	case &l.policy:
	case &l.fallbackPolicy:
		s, has, field, c = l.fallback, l.fallbackFeatures, "Fallback", l.opts.Fallback
	default:
		return errors.New("ratelimit: Settle: the Decision is another limiter's")
	}
	if !has.Has(store.GiveBack) {
		return fmt.Errorf("ratelimit: %w", lackErr("Settle and Release need", field, c, store.GiveBack))
	}
	var r *request
	if d.byAddr {
		r = l.newAddrRequest(d.addr, l.clock.mono())
	} else {
		r = l.newRequest(d.tenant, l.clock.mono())
	}
	defer r.free()
	r.setPlan(d.plan) // the fallback's own, when the fallback decided
	r.Cost, r.Slot = d.cost-int64(cost), d.slot
	r.onCalendar(l.clock)
	var err error
	switch {
	case s == l.fallback || l.info.Local:
		r.Deadline, _ = ctx.Deadline()
		err = s.Give(ctx, &r.Request, d.marks)
	default:
		err = l.call(ctx, r, nil, func(ctx context.Context, r *store.Request, _ *store.Result) error { return s.Give(ctx, r, d.marks) })
	}
	if err == nil {
		if l.refusals != nil && r.Cost > 0 {
			// A refusal this replica cached for the tenant may no longer
			// hold.
			l.refusals.forget(r.Key)
		}
		if s == l.fallback && l.owed != nil {
			// What the store is owed of the request changes with it.
			l.owed.Settle(r.Key, r.Cost, l.clock.elapsed())
		}
		return nil
	}
	if errors.Is(err, ErrContextDone) || ctx.Err() != nil {
		return err // the caller's own doing: nothing to say of the store
	}
	if !isBreakerOpen(err) {
		msg := "ratelimit: counter failed to give back a request's count; it stands until its window or lease ends"
		if r.Cost < 0 {
			msg = "ratelimit: counter failed to charge a request's settled cost; the request stays counted at the cost it was decided with"
		}
		l.failures.Record(slog.LevelError, msg,
			slog.String("tenant", logTenant(d.tenant)), slog.String("key", string(r.Key)), slog.Any("err", err))
	}
	return err
}

// Release gives back what d took: Settle(ctx, d, 0). It gives back d's
// cost in every limit it was counted in, when those windows are still the
// ones it was counted in (a window that has ended is left alone), or, for
// an InFlight limiter, the slots d holds. A fixed window on Redis whose
// count falls to 0 is deleted, so that the tenant's next request starts a
// window, as if none had come; a MemoryCounter's window runs on.
//
// Give back each decision once: a second Release of the same Decision
// gives its cost back again (the slots of an InFlight decision are the
// exception: they are gone after the first). Settle says the rest: the
// decisions it leaves alone, the context, a store failure.
func (l *Limiter) Release(ctx context.Context, d Decision) error {
	return l.Settle(ctx, d, 0)
}

package ratelimit

import (
	"context"
	"errors"
	"log/slog"
)

// Giving back: a request's cost is spent when it is decided, but what a
// gateway charges is often known only when the response is written
// (Config.SkipFailedRequests), a later limiter on the same request may
// refuse it, and a request in flight holds its slots until it ends.
// Release gives back what one Decision took, in the windows it was counted
// in, which the Decision names by the marks its store gave them (see
// Count.Mark).

// Release gives back what d took, in every limit it was counted in, when
// those windows are still the ones it was counted in (a window that has
// ended is left alone), or, for an InFlight limiter, the slots d holds.
// It is a no-op, returning nil, for a decision that took nothing: refused,
// shadowed, decided by the over-limit cache or by nothing. A fixed
// window on Redis whose count falls to 0 is deleted, so that the tenant's
// next request starts a window, as if none had come; a MemoryCounter's
// window runs on.
//
// Give back each decision once: a second Release of the same Decision
// gives its cost back again (the slots of an InFlight decision are the
// exception: they are gone after the first). d must be this limiter's.
// ctx bounds the wait, within Options.StoreTimeout; a request's
// middleware gives back with the request's values but not its
// cancellation. A store failure is logged as any other and returned, and
// the count stands: a window's until it ends, a slot until its lease
// does. Release needs Counter and Fallback to be Stores: a Counter that
// counts by Incr alone cannot give back.
func (l *Limiter) Release(ctx context.Context, d Decision) error {
	if !d.took {
		return nil
	}
	store := l.store
	switch d.policy {
	case &l.policy:
	case &l.fallbackPolicy:
		store = l.fallback
	default:
		return errors.New("ratelimit: Release: the Decision is another limiter's")
	}
	r := l.base
	r.Tenant, r.Cost, r.Slot, r.Marks, r.Now = d.tenant, d.cost, d.slot, d.marks, l.clock.mono()
	if d.byAddr {
		r.key.addr, r.key.byAddr = d.addr, true
	}
	r.Limit, r.Window = int64(d.Limit), d.Window
	if d.quotas != nil {
		r.Limit, r.Window = d.lims[0].limit, d.lims[0].window
	}
	r.setQuotas(d.quotas) // the fallback's own, when the fallback decided
	if d.quotas != nil && d.quotas.calendar {
		r.Now = l.clock.Now() // a calendar period follows the wall clock
	}
	var err error
	switch {
	case store == l.fallback || l.info.Local:
		r.Deadline, _ = ctx.Deadline()
		err = store.Give(ctx, r)
	default:
		_, err = l.call(ctx, &r, func(ctx context.Context, r Request) (Answer, error) { return Answer{}, store.Give(ctx, r) })
	}
	if err == nil {
		if l.refusals != nil {
			// A refusal this replica cached for the tenant may no longer
			// hold.
			var buf [maxKeyLen]byte
			l.refusals.forget(r.appendKey(buf[:0]))
		}
		return nil
	}
	if errors.Is(err, ErrContextDone) || ctx.Err() != nil {
		return err // the caller's own doing: nothing to say of the store
	}
	if err != errBreakerOpen {
		l.failures.record(slog.LevelError, "ratelimit: counter failed to give back a request's count; it stands until its window or lease ends",
			slog.String("tenant", logTenant(d.tenant)), slog.String("key", r.Key()), slog.Any("err", err))
	}
	return err
}

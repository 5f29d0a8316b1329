package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"
)

// Waiting instead of refusing: a TokenBucket request that does not fit
// now may reserve its turn on the store (later callers, on any replica,
// queue behind it) and sleep until it comes. Limiter.Wait and WaitN do it
// for a worker; a middleware's MaxDelay does it for a request that would fit
// within that delay.

// Wait is WaitN(ctx, tenant, 1).
func (l *Limiter) Wait(ctx context.Context, tenant string) (Decision, error) {
	return l.WaitN(ctx, tenant, 1)
}

// WaitN waits until tenant may spend n units, as golang.org/x/time/rate's
// WaitN does, but across every replica that shares the store. It reserves
// the request's turn in the tenant's bucket on the store, so that later
// callers queue behind it. Then it sleeps until that turn and returns the
// allowed Decision. It needs a TokenBucket limiter, and returns an error
// saying so for another algorithm.
//
// When the turn would come after ctx's deadline, or n is above the
// burst, WaitN returns at once with an error and the refused Decision
// (whose RetryAfter says when the cost would fit), having spent nothing.
// Without a deadline it waits as long as the turn takes. When ctx ends
// while it sleeps, it gives the reservation back (see Release) and
// returns ctx's error with the refused Decision, which holds nothing more
// to release.
//
// WaitN is for calls to someone else's API, whose limit a flood would
// break, so a store failure never lets a call through unmetered, whatever
// Options.FailClosed says: with a Fallback, WaitN waits for its turn in
// the fallback's bucket (FallbackLimit's share of the rate and of the
// burst), into which the turns this replica reserved on the store and
// has not started yet are counted first; without one, it returns at once
// an error that wraps the store's (errors.Is finds it), having spent
// nothing. In shadow mode WaitN never waits: it decides as Take does, and
// lets through what it would refuse, a store failure included.
func (l *Limiter) WaitN(ctx context.Context, tenant string, n int) (Decision, error) {
	var d Decision
	if err := l.wiring.DelayErr; err != nil {
		return d, fmt.Errorf("ratelimit: Wait: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return d, err
	}
	delay := time.Duration(math.MaxInt64)
	if deadline, ok := ctx.Deadline(); ok {
		delay = deadline.Sub(l.clock.Now())
		if delay <= 0 {
			return d, context.DeadlineExceeded
		}
	}
	r := l.newRequest(tenant, l.clock.mono())
	defer r.free()
	d.waiter = true
	if err := l.await(ctx, &d, r, n, delay); err != nil {
		return d, err
	}
	switch {
	case errors.Is(d.Err, ErrContextDone):
		return d, d.Err
	case d.Allowed:
		return d, nil
	case d.By == ByNone:
		return d, fmt.Errorf("ratelimit: Wait: the counter could not decide, and Wait lets no call through unmetered: %w", d.Err)
	case d.RetryAfter == 0:
		return d, fmt.Errorf("ratelimit: Wait: a cost of %d never fits in the tenant's burst of %d", r.Cost, d.Limit)
	case d.By == ByFallback:
		return d, fmt.Errorf("ratelimit: Wait: the counter could not decide, and the turn in the fallback's share comes in %v, "+
			"past the context's deadline (%w)", d.RetryAfter, d.Err)
	}
	return d, fmt.Errorf("ratelimit: Wait: the turn comes in %v, past the context's deadline", d.RetryAfter)
}

// takeDelayed is take for a door with MaxDelay: a request of tenant (or
// of the client at addr, when byAddr) that fits within delay waits for
// its turn. A request whose context ends while it waits has given its
// turn back, and is refused, with ErrContextDone: its client is gone, and
// what it reserved is no longer its own.
func (l *Limiter) takeDelayed(ctx context.Context, d *Decision, tenant string, addr netip.Addr, byAddr bool, cost int, delay time.Duration) {
	var r *request
	if byAddr {
		r = l.newAddrRequest(addr, l.clock.mono())
	} else {
		r = l.newRequest(tenant, l.clock.mono())
	}
	defer r.free()
	if err := l.await(ctx, d, r, cost, delay); err != nil {
		d.Allowed, d.took, d.Err, d.RetryAfter = false, false, ErrContextDone, d.wait
	}
}

// await decides r, of cost, allowing it to wait delay for its turn, and
// sleeps until that turn. It returns ctx's error when ctx ends while it
// sleeps, having given the turn back.
func (l *Limiter) await(ctx context.Context, d *Decision, r *request, cost int, delay time.Duration) error {
	if !l.opts.Shadow {
		r.Delay = delay
	}
	l.takeAny(ctx, d, r, cost)
	if d.wait <= 0 {
		return nil
	}
	var key []byte
	var gen uint64
	if l.turns != nil && d.By == ByCounter {
		key = r.Key
		now := l.clock.since(r.Now)
		gen = l.turns.Reserve(key, d.cost, now, now+d.wait)
	}
	err := l.sleep(ctx, d.wait)
	if key != nil {
		l.turns.Started(key, d.cost, gen, l.clock.elapsed())
	}
	if err != nil {
		if gerr := l.Release(context.WithoutCancel(ctx), *d); gerr != nil {
			l.failures.Record(slog.LevelError, "ratelimit: a request that stopped waiting could not give its turn back; it stands",
				slog.String("tenant", logTenant(r.Tenant)), slog.Any("err", gerr))
		}
		// Given back: the Decision holds nothing more to release.
		d.Allowed, d.took = false, false
		return err
	}
	return nil
}

// sleep waits for d, or until ctx ends, whose error it then returns. A
// test's limiter sleeps on its own clock.
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	if l.sleepFor != nil {
		return l.sleepFor(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"syscall"

	"github.com/gatewaykit/ratelimit/internal/owed"
	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/store"
)

// The call of a store that waits: the over-limit cache first, then a call
// through the breaker of the key's server, under the time rule; and what
// the limiter does when the store fails (the fallback, or failing open or
// closed).

// What a store's errors may say of themselves (see store.Store): a
// misconfiguration, with what to fix; an answer about one key, which says
// that the server is up. (One failed round trip that several requests
// shared, the breaker counts once: internal/breaker reads that.)
type (
	misconfigured interface {
		error
		Fix() string
	}
	keyAnswer interface {
		error
		KeyOnly()
	}
)

// fixOf is what err says to fix, or "".
func fixOf(err error) string {
	if m, ok := errors.AsType[misconfigured](err); ok {
		return m.Fix()
	}
	return ""
}

// takeFromStore decides r in Options.Counter, a store that is not local:
// the over-limit cache first, then a call through the breaker, timed.
func (l *Limiter) takeFromStore(ctx context.Context, d *Decision, r *request) {
	holds := false
	res := r.result()
	if l.leases != nil {
		var spent bool
		if spent, holds = l.leases.spend(r, res); spent {
			l.counted(d, &l.policy, ByCounter, r, res, nil)
			l.decided(d, r)
			return
		}
	}
	since := l.clock.since(r.Now)
	if l.refusals != nil && r.Delay == 0 && !holds {
		// (A request that may wait for its turn may fit where a refusal
		// without waiting was learned, and so may one whose lease holds
		// part of its cost.)
		if l.refusals.refuse(r, res, since) {
			l.counted(d, &l.policy, ByCache, r, res, nil)
			l.decided(d, r)
			return
		}
	}
	err := l.ask(ctx, r, res)
	if err == nil && !res.Allowed && l.refusals != nil {
		l.refusals.add(r, res, since)
	}
	if err == nil && l.usage != nil {
		l.usage.learn(r, res, since)
	}
	if res.Counted {
		l.countsByTransaction()
	}
	if err != nil {
		l.failed(ctx, d, r, err)
		return
	}
	l.counted(d, &l.policy, ByCounter, r, res, nil)
	l.decided(d, r)
}

// ask has Options.Counter Take r into res, through the breaker of its
// key's server, under the time rule.
func (l *Limiter) ask(ctx context.Context, r *request, res *store.Result) error {
	return l.call(ctx, r, res, l.store.Take)
}

// read reads r's limits from Options.Counter, a Take of cost 0, as a
// request asks: through the breaker, under the time rule, unless the
// store is local.
func (l *Limiter) read(ctx context.Context, r *request) (*store.Result, error) {
	r.Cost = 0
	res := r.result()
	if l.info.Local {
		r.Deadline, _ = ctx.Deadline()
		return res, l.store.Take(ctx, &r.Request, res)
	}
	return res, l.call(ctx, r, res, l.store.Take)
}

// call calls op (a Take or a Give of Options.Counter) for r, through the
// breaker of its key's server, under the time rule. The breaker and the
// metrics' latency learn only what the store did: a request whose own
// context ended (ErrContextDone) tells them nothing, and an answer about
// one key (keyAnswer) says that the server is up.
func (l *Limiter) call(ctx context.Context, r *request, res *store.Result, op func(context.Context, *store.Request, *store.Result) error) error {
	b := l.breakers.First
	if l.info.Server != nil {
		b = l.breakers.Of(l.info.Server(r.Key))
	}
	ok, probe := b.Allow()
	if !ok {
		return b.Err()
	}
	err := callTimed(ctx, &l.rule, r, res, op)
	switch {
	case err == nil:
		b.Success(probe)
		l.owedDue()
	case errors.Is(err, ErrContextDone):
		b.Abandoned(probe)
		l.opts.Metrics.canceled()
		return err
	case isKeyAnswer(err):
		b.Success(probe) // the server answered, for this key
	default:
		b.Failure(probe, err)
	}
	if m := l.opts.Metrics; m != nil {
		m.roundTrip(l.clock.Now().Sub(r.Now), err == nil, causeOf(err))
	}
	return err
}

// isBreakerOpen reports whether err is an open breaker's, which asked
// nothing of the store.
func isBreakerOpen(err error) bool { return errors.Is(err, errBreakerOpen) }

// isKeyAnswer reports whether err is an answer about one key.
func isKeyAnswer(err error) bool {
	_, ok := errors.AsType[keyAnswer](err)
	return ok
}

// causeOf is why err failed a round trip.
func causeOf(err error) cause {
	if _, ok := errors.AsType[misconfigured](err); ok {
		return causeConfiguration
	}
	if timerule.IsTimeout(err) {
		return causeTimeout
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return causeRefused
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return causeRefused
	}
	return causeOther
}

// failed decides into d the request r that Options.Counter could not
// decide, for err: by the fallback, or failing open or closed. A call of
// Limiter.Wait (d.waiter) is never let through unmetered: it fails closed,
// and the fallback, too, has it wait for its turn.
func (l *Limiter) failed(ctx context.Context, d *Decision, r *request, err error) {
	waiter := d.waiter
	if errors.Is(err, ErrContextDone) {
		// The request's own doing: nothing to say of the store, and no
		// fallback's count to spend for a client that is gone.
		l.uncounted(d, r, err)
		return
	}
	lastResort := "fail open"
	if l.opts.FailClosed || waiter {
		lastResort = "fail closed"
	}
	if !isBreakerOpen(err) { // the breaker logged when it opened
		action := lastResort
		if l.fallback != nil {
			action = "fallback"
		}
		if m, ok := errors.AsType[misconfigured](err); ok {
			l.failures.Record(slog.LevelError, "ratelimit: the counter is misconfigured, request decided by "+action,
				slog.String("fix", m.Fix()), slog.String("tenant", logTenant(r.Tenant)), slog.String("key", string(r.Key)), slog.Any("err", err))
		} else {
			l.failures.Record(slog.LevelError, "ratelimit: counter failed, request decided by "+action,
				slog.String("tenant", logTenant(r.Tenant)), slog.String("key", string(r.Key)), slog.Any("err", err))
		}
	}
	if l.fallback != nil {
		f := l.fallbackRequest(ctx, r)
		defer f.free()
		if waiter {
			f.Delay = r.Delay // the fallback's bucket reserves the turn
		}
		if l.usage != nil && f.Cost <= f.Most() {
			res := r.result()
			if l.usage.lower(r, f, res, l.clock.since(r.Now), l.fallbackShare) {
				// Less than its cost is this replica's to spend: refused,
				// with what the store last reported.
				l.counted(d, &l.policy, ByFallback, r, res, err)
				l.decided(d, r)
				return
			}
		}
		if l.turns != nil {
			l.takeOverTurns(ctx, f)
		}
		res, ferr := l.askFallback(ctx, f)
		if ferr == nil && res.Allowed && l.owed != nil {
			now := l.clock.since(r.Now)
			if w, ok := l.usage.owedIn(r, now); ok {
				l.owed.Add(r.Key, owedOf(r), underOf(r), f.Cost, &w, now)
			}
		}
		if ferr == nil {
			l.counted(d, &l.fallbackPolicy, ByFallback, f, res, err)
			if f.Cost > f.Most() {
				d.RetryAfter = 0 // it never fits the fallback's budget
			}
			l.decided(d, f)
			return
		}
		if ctx.Err() == nil { // else the request gave up: not the fallback's failure
			l.failures.Record(slog.LevelError, "ratelimit: counter failed, request decided by "+lastResort,
				slog.String("tenant", logTenant(r.Tenant)), slog.String("key", string(r.Key)), slog.Any("err", ferr))
		}
		err = fmt.Errorf("%w; fallback: %w", err, ferr)
	}
	l.uncounted(d, r, err)
}

// takeOverTurns counts in the fallback's bucket for f's key the turns
// this replica reserved on the store that are still to come, once, by a
// charge of the bucket alone (no quota's window has noWindow for its
// mark): they start at their time all the same.
func (l *Limiter) takeOverTurns(ctx context.Context, f *request) {
	n := l.turns.TakeOver(f.Key, l.clock.elapsed())
	if n == 0 {
		return
	}
	g := f.clone()
	defer g.free()
	g.Cost, g.Delay = -n, 0
	var marks store.Marks
	for j := range marks {
		marks[j] = noWindow
	}
	marks[0] = 0 // the bucket's own mark
	if err := l.fallback.Give(ctx, &g.Request, marks); err != nil {
		l.failures.Record(slog.LevelError, "ratelimit: the fallback failed to count the turns reserved on the counter; they start all the same",
			slog.String("tenant", logTenant(f.Tenant)), slog.Int64("units", n), slog.Any("err", err))
	}
}

// noWindow is a mark that names no window (see store.Count.Mark): a Give
// with it leaves the limit alone.
const noWindow = store.NoWindow

// fallbackRequest is r at the fallback's budget, waiting only as ctx lets
// it. Free it before r, whose key it shares.
func (l *Limiter) fallbackRequest(ctx context.Context, r *request) *request {
	f := r.clone()
	f.setPlan(r.plan.fallback)
	f.Delay = 0 // the fallback decides now: no waiting
	f.Deadline, _ = ctx.Deadline()
	return f
}

// askFallback decides f in Options.Fallback, directly: the fallback is
// what decides while the counter cannot.
func (l *Limiter) askFallback(ctx context.Context, f *request) (*store.Result, error) {
	res := f.result()
	if f.Cost > f.Most() {
		// It never fits: refused, its window's whole length to run.
		res.Counts[0] = store.Count{N: f.Limit, Left: f.Window, Length: f.Window}
		return res, nil
	}
	if f.Cost != 1 && !l.fallbackFeatures.Has(store.Costs) {
		return res, lackErr(fmt.Sprintf("a cost of %d needs", f.Cost), "Fallback", l.opts.Fallback, store.Costs)
	}
	return res, l.fallback.Take(ctx, &f.Request, res)
}

// fallbackShare is this replica's share of left, what the store last
// reported a tenant had left of a limit: FallbackLimit's proportion of
// it (see fallbackLimit), rounded down, so that replicas whose
// FallbackLimits add up to Limit spend no more than left between them,
// and never more than left.
func (l *Limiter) fallbackShare(left int64) int64 {
	if l.opts.FallbackLimit >= l.opts.Limit {
		return left
	}
	return int64(math.Floor(float64(left) * float64(l.opts.FallbackLimit) / float64(l.opts.Limit)))
}

// owedDue starts a sweep that charges the store what the fallback
// admitted while it failed (see chargeOwed), when something is owed and
// the store has just answered: one at a time, and one a BreakerCooldown
// at most, so that a store whose servers fail in part (a cluster's node
// down) is not swept on every answer of the others.
func (l *Limiter) owedDue() {
	if l.owed != nil && l.owed.Owing() && l.owed.Due(l.clock.elapsed()) {
		go l.chargeOwed()
	}
}

// chargeOwed charges the store what this replica's fallback admitted
// while the store failed, once, in each limit whose window (or calendar
// period) is still the one the store last reported before the failure,
// as Settle charges (see store.Store's Give): a window that has ended meanwhile
// is left alone, and nothing is charged into one the store never had. So
// a month quota counts the requests an outage let through, and no
// replica counts them twice: each charges only its own, taking them out
// before it sends the charge. It goes shard by shard, a few keys at once,
// each through the breaker and under the time rule, as a request's call.
//
// The windows are those of the fallback's memory of usage (usageMemory):
// a tenant the replica had not heard the store answer for (a replica
// started during the outage, or one that forgot the tenant to stay within
// its bound) owes nothing, and neither does a token bucket, which refills
// as time goes (the quotas beside it do). What is owed is bounded as that
// memory is, and counted in Metrics; a debt dropped to make room goes
// uncharged (MetricsSnapshot.OwedEvicted), and so does what a replica
// held when it stopped.
func (l *Limiter) chargeOwed() {
	defer func() { l.owed.Swept(l.clock.elapsed() + l.opts.BreakerCooldown) }()
	const atOnce = 8
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for i := range l.owed.Shards() {
		for _, it := range l.owed.Take(i, l.clock.elapsed()) {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				l.chargeOne(&it)
			})
		}
	}
	wg.Wait()
}

// chargeOne charges the store what one key owes: one Give for each
// amount owed, in the limits that owe it. A charge that reached no server
// (the breaker is open, the server cannot be reached) is kept for the
// next sweep; one that failed after it may have reached the store is not
// sent again, so as never to count twice, and is logged and counted.
func (l *Limiter) chargeOne(it *owed.Item[owedReq, under]) {
	var charged, unsure int64
	r := it.Req.request(it.Key, l.clock.mono())
	defer r.free()
	for {
		u, marks := it.Next()
		if u == 0 {
			break
		}
		r.Cost, r.Delay, r.Slot = -u, 0, 0
		r.Now = l.clock.mono()
		r.onCalendar(l.clock)
		err := l.call(context.Background(), r, nil, func(ctx context.Context, r *store.Request, _ *store.Result) error { return l.store.Give(ctx, r, marks) })
		if err != nil && notSent(err) {
			l.owed.PutBack(it, l.clock.elapsed())
			break
		}
		if err != nil {
			unsure = max(unsure, u)
			l.failures.Record(slog.LevelError, "ratelimit: counter failed to charge what the fallback admitted; it is not sent again, so as never to count it twice",
				slog.String("tenant", logTenant(r.Tenant)), slog.String("key", it.Key), slog.Int64("units", u), slog.Any("err", err))
		} else {
			charged = max(charged, u)
		}
		it.Paid(u)
	}
	l.opts.Metrics.owedSettled(charged, unsure)
}

// notSent reports whether err says that a call reached no server.
func notSent(err error) bool {
	return isBreakerOpen(err) || errors.Is(err, ErrContextDone) || causeOf(err) == causeRefused
}

// countsByTransaction says once, at warning level, that the store counts
// without its script (see RedisCounter), and what that changes, with the
// store's words for why.
func (l *Limiter) countsByTransaction() {
	if l.byTransaction.Load() || !l.byTransaction.CompareAndSwap(false, true) {
		return
	}
	var refusal error
	if l.info.CountsRefused != nil {
		refusal = l.info.CountsRefused()
	}
	l.failures.Write(slog.LevelWarn, "ratelimit: the server refuses scripts, so fixed windows count by MULTI/EXEC: "+
		"exact, but a refused request's cost stays counted, so a tenant that keeps knocking over its limit keeps its window full",
		slog.String("fix", fixOf(refusal)), slog.Any("err", refusal))
}

package ratelimit

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// Decision is how a Limiter decided one request, with the figures the
// response reports.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool

	// By says what decided.
	By Decider

	// Limit is the budget the request was counted against, in units:
	// Options.Limit or the tenant's Plan, or the fallback's budget when the
	// fallback decided.
	Limit int

	// Window is the window of that budget; for InFlight, the lease.
	Window time.Duration

	// Remaining is how many more units the budget allows now, 0 once
	// spent; -1 when nothing counted the request (By is ByNone) or its
	// cost passed Limit, so that it was refused without asking the counter.
	Remaining int

	// Reset is how long until more than Remaining is available: the time a
	// fixed window has left, or for a sliding window until one more unit
	// is, or for a TokenBucket until it is full; 0 when nothing counted
	// the request. For InFlight it is always 1
	// second, a hint: a slot frees whenever a request ends.
	Reset time.Duration

	// RetryAfter is, for a request that a counter refused, how long until
	// a request of the same cost would fit: the time the fixed window has
	// left, or until the sliding window's count has fallen enough, or the
	// bucket has refilled enough. 0 when allowed, or when the cost passes
	// Limit (a TokenBucket's Burst) and never fits.
	RetryAfter time.Duration

	// Shadowed reports that the limiter, in Options.Shadow mode, let
	// through a request it would have refused (429, or 503 with
	// FailClosed). Allowed is then true.
	Shadowed bool

	// Policy is the name of the limit that the figures above (Limit,
	// Window, Remaining, Reset, RetryAfter) are of, as the RateLimit
	// header fields name it: the limiter's Options.Name, or "default", for
	// the main limit, or a quota's Name. With quotas it is the limit that
	// refused the request (of several, the one with room again last), or
	// when allowed the one with the fewest units left (of those, the one
	// that resets last).
	Policy string

	// Err is why Options.Counter could not decide, when By is not
	// ByCounter: the store's failure, which the Limiter has logged, or
	// ErrContextDone, the request's own context ending first, which it
	// has not. It is for logs and metrics, never for a client.
	Err error

	policy *policyHeaders

	// The plan the request was decided against (the fallback's own,
	// when the fallback decided), for Limiter.Release.
	plan *plan

	// With quotas: the plan's quotas (kept beside it, as the headers read
	// them on every response), every limit's figures (the main one first),
	// and the limit that Limit, Window and the rest are of: 0 the main
	// one, i+1 quota i.
	quotas *quotaSet
	lims   [maxQuotas + 1]figure
	named  int

	// What Limiter.Release gives back: took says the request was counted
	// and allowed; then cost, in the windows that marks name (see
	// Count.Mark), or the slots of slot, under the key of tenant, or of
	// addr.
	took   bool
	byAddr bool
	tenant string
	addr   netip.Addr
	cost   int64
	slot   uint64
	marks  [maxQuotas + 1]int64

	// wait is how long a TokenBucket request that may wait for its turn
	// (Limiter.Wait, MaxDelay) waits for it: the store reserved it.
	wait time.Duration

	// waiter says that the request is Limiter.Wait's: a call to someone
	// else's API, which a store failure never lets through unmetered.
	waiter bool
}

// Decider is what decided a request.
type Decider int

const (
	// ByCounter: Options.Counter decided the request (or the limiter
	// refused it for a cost past its limit, which never fits).
	ByCounter Decider = iota
	// ByFallback: the counter failed or the breaker is open, and
	// Options.Fallback counted the request against FallbackLimit.
	ByFallback
	// ByNone: nothing could count the request; it was let through, or
	// refused with Options.FailClosed. The middleware answers the refusal
	// 503, not 429.
	ByNone
	// ByCache: the over-limit cache refused the request, from what the
	// counter had reported, without asking it.
	ByCache
	numDeciders
)

// policyName is the name of the limit that d's figures are of (see
// Decision.Policy).
func (d *Decision) policyName() string {
	if d.policy == nil {
		return ""
	}
	if d.named > 0 {
		return d.quotas.quotas[d.named-1].Name
	}
	return d.policy.policy
}

// calendar is the calendar period of the limit that d's figures are of,
// 0 for a window.
func (d *Decision) calendar() Calendar {
	if d.named == 0 || d.quotas == nil {
		return 0
	}
	return d.quotas.quotas[d.named-1].Calendar
}

// String returns "counter", "fallback", "none" or "over-limit-cache".
func (d Decider) String() string {
	switch d {
	case ByCounter:
		return "counter"
	case ByFallback:
		return "fallback"
	case ByNone:
		return "none"
	case ByCache:
		return "over-limit-cache"
	}
	return "invalid"
}

// The figures of a Decision, each derived in one place from what a store
// reports (see window.Limit.Figures): the main limit's, and with quotas
// every limit's and which of them names the decision.

// counted decides into d a request r that a store decided, as a says,
// against the budget p.
func (l *Limiter) counted(d *Decision, p *policyHeaders, by Decider, r *request, a *store.Result, err error) {
	main := window.Main(r.Budget)
	f := main.Figures(&a.Counts[0], r.Cost)
	d.Allowed, d.By, d.Limit, d.Window = a.Allowed, by, int(r.Limit), r.Window
	d.Remaining, d.Reset, d.RetryAfter = int(f.Remaining), f.Reset, f.Retry
	d.Err, d.policy, d.plan, d.quotas, d.named = err, p, r.plan, r.set(), 0
	d.took, d.cost = a.Allowed && by != ByCache, r.Cost
	if d.took {
		d.slot, d.marks[0] = r.Slot, a.Counts[0].Mark
		if r.Delay > 0 {
			d.wait = main.Bucket().Wait(&a.Counts[0])
		}
	}
	if r.Algorithm == InFlight && a.Expired > 0 {
		l.opts.Metrics.slotsExpired(a.Expired)
	}
	if r.set() != nil {
		d.quotaFigures(r, a, f)
	}
	d.Policy = d.policyName()
}

// quotaFigures gives d, decided as a says for r, which has quotas, every
// limit's figures, and the figures of the limit that names the decision
// (Decision.Policy): the one that refused (of several, the one with
// room again last), or when allowed the one with the fewest units left
// (of those, the one that resets last). main is the main limit's.
func (d *Decision) quotaFigures(r *request, a *store.Result, main window.Figures) {
	if d.took {
		for j := range r.Quotas {
			d.marks[j+1] = a.Counts[j+1].Mark
		}
	}
	d.lims[0] = figure{limit: r.Limit, window: r.Window, remaining: main.Remaining, reset: main.Reset}
	retry := main.Retry
	if !a.Allowed && a.Counts[0].Fits {
		retry = -1 // the main limit did not refuse it
	}
	lims, n := window.Limits(r.Budget)
	for i := range n - 1 {
		c := &a.Counts[i+1]
		q := lims[i+1]
		qf := q.Figures(c, r.Cost)
		f := figure{limit: q.Limit, window: q.Window, remaining: qf.Remaining, reset: qf.Reset}
		if q.Calendar != 0 {
			f.window = c.Length
		}
		d.lims[i+1] = f
		named := &d.lims[d.named]
		switch {
		case !a.Allowed && !c.Fits:
			if qf.Retry > retry {
				d.named, retry = i+1, qf.Retry
			}
		case !a.Allowed:
		case f.remaining < named.remaining || f.remaining == named.remaining && f.reset > named.reset:
			d.named = i + 1
		}
	}
	f := d.lims[d.named]
	d.Limit, d.Window, d.Remaining, d.Reset = int(f.limit), f.window, int(f.remaining), f.reset
	d.RetryAfter = 0
	if !a.Allowed {
		d.RetryAfter = retry
	}
}

// uncounted decides into d the request r that nothing counted, for err:
// let through, or refused with Options.FailClosed, or for Limiter.Wait.
// Only the limit and the policy are known.
func (l *Limiter) uncounted(d *Decision, r *request, err error) {
	*d = Decision{Allowed: !l.opts.FailClosed && !d.waiter, waiter: d.waiter, By: ByNone, Limit: int(r.Limit), Window: r.Window, Remaining: -1,
		Err: err, policy: &l.policy, Policy: l.policy.policy, plan: r.plan}
	l.unknownFigures(d, r)
	l.decided(d, r)
}

// unknownFigures gives d, a decision of r without counts, its quotas'
// limits and windows, a calendar period's on the limiter's clock.
func (l *Limiter) unknownFigures(d *Decision, r *request) {
	if r.set() == nil {
		return
	}
	d.quotas = r.set()
	d.lims[0] = figure{limit: r.Limit, window: r.Window, remaining: -1}
	for i, q := range r.Quotas {
		w := q.Window
		if q.Calendar != 0 {
			start, end := q.Calendar.Period(r.Now)
			w = end.Sub(start)
		}
		d.lims[i+1] = figure{limit: q.Limit, window: w, remaining: -1}
	}
}

// neverFits decides into d the request r whose cost passes one of its
// limits, which it is refused by: the first such, the main one first.
func (l *Limiter) neverFits(d *Decision, r *request) {
	*d = Decision{By: ByCounter, Limit: int(r.Limit), Window: r.Window, Remaining: -1, policy: &l.policy, cost: r.Cost, plan: r.plan}
	l.unknownFigures(d, r)
	if r.Cost <= r.Limit && r.set() != nil {
		for i, q := range r.Quotas {
			if r.Cost > q.Limit {
				d.named, d.Limit, d.Window = i+1, int(q.Limit), d.lims[i+1].window
				break
			}
		}
	}
	d.Policy = d.policyName()
}

// decided counts d in the metrics and, in shadow mode, lets a request
// that d refuses through.
func (l *Limiter) decided(d *Decision, r *request) {
	if r.Algorithm == InFlight && d.By != ByNone {
		l.opts.Metrics.slotsDecided(d.cost, d.took)
	}
	if d.took {
		d.tenant = r.Tenant
		if r.byAddr {
			d.byAddr, d.addr = true, r.addr
		}
	}
	if l.opts.Shadow && !d.Allowed {
		l.shadow(d, r)
		return
	}
	o := outcomeAllowed
	switch {
	case d.By == ByNone && d.Allowed:
		o = outcomeFailedOpen
	case d.By == ByNone:
		o = outcomeFailedClosed
	case !d.Allowed:
		o = outcomeLimited
	}
	l.opts.Metrics.decided(o, d.By)
}

// shadow lets through a request that d refuses, in shadow mode, and logs
// it.
func (l *Limiter) shadow(d *Decision, r *request) {
	d.Allowed, d.Shadowed = true, true
	l.opts.Metrics.decided(outcomeShadowLimited, d.By)
	l.shadowed.Record(slog.LevelInfo, "ratelimit: shadow mode let through a request it would have refused",
		slog.String("tenant", logTenant(r.Tenant)), slog.String("key", string(r.Key)),
		slog.Int("limit", d.Limit), slog.Int("remaining", d.Remaining), slog.String("decided by", d.By.String()))
}

package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/breaker"
	"github.com/gatewaykit/ratelimit/internal/door"
	"github.com/gatewaykit/ratelimit/internal/owed"
	"github.com/gatewaykit/ratelimit/internal/turns"
	"github.com/gatewaykit/ratelimit/store"
)

// Limiter decides whether a request is within its tenant's budget. The
// budget is Limit requests (or units of cost) per Window, or the
// tenant's own Plan. It is counted in Options.Counter by
// Options.Algorithm. The Limiter holds the whole decision: keys, plans,
// time budget, breaker, fallback, shadow mode, log and metrics. It asks
// its store only what the store holds. A middleware only reads the tenant
// and the cost from a request, and writes the Decision into the
// response. A Limiter is safe for concurrent use by multiple goroutines.
type Limiter struct {
	opts Options

	// The stores: Options.Counter and Options.Fallback, what the first
	// said of itself, and what each decides (features.go).
	store, fallback            store.Store
	info                       store.Info
	features, fallbackFeatures store.Features

	// leases is store, with Options.Leases; else nil.
	leases *leaseStore

	breakers *breaker.Set // nil for a local store, which is called directly
	rule     timeRule

	// The throttled logs: counter failures, the gateway's own mistakes (a
	// cost below 1), the plans that cannot be, and shadow mode's would-be
	// refusals.
	failures, mistakes, badPlans, shadowed *throttledLog
	refusals                               *refusals // nil when off, or for a local store

	// What the store last reported of each tenant's usage, for the
	// fallback; nil without one, for a local store, or for InFlight.
	usage *usageMemory

	// What the fallback admitted, owed to the store (see chargeOwed); nil
	// where usage is.
	owed *owed.Table[owedReq, under]

	// The turns reserved on the store and not started, for the fallback
	// of a TokenBucket; nil where usage is, or for another algorithm.
	turns *turns.Table

	// Read once per request.
	clock clock

	// The store counts by transactions, and the limiter has said so; its
	// Redis keeps nothing across a restart, and Ping has said so.
	byTransaction, saidVolatile atomic.Bool

	// The throttled log of each type of tenant that a door cannot read.
	unreadableTypes sync.Map // reflect.Type → *throttledLog

	// The budgets a decision is made against, with their header values
	// formatted once.
	policy, fallbackPolicy policyHeaders

	// Options.Quotas, checked (nil for none), and those of the plans that
	// PlanFor returns.
	quotas     *quotaSet
	planQuotas planQuotas

	// The limiter's own plan, its plans of PlanFor, and Ping's (a limit
	// of 1); the start of its keys.
	own    *plan
	plans  planCache
	probe  *plan
	prefix string

	wiring door.Wiring

	// sleepFor, when not nil, is how a test's limiter waits for a turn
	// (see sleep).
	sleepFor func(ctx context.Context, d time.Duration) error
}

// errBreakerOpen: the request was decided without asking the counter
// (errors.Is finds it; the breaker's error wraps the failure that opened
// it).
var errBreakerOpen = breaker.ErrOpen

// NewLimiter returns a Limiter for opts. It panics, naming the field, when
// opts is invalid.
func NewLimiter(opts Options) *Limiter {
	return newLimiter(opts, nil)
}

// newLimiter is NewLimiter on the clock now (nil: the real clock).
func newLimiter(opts Options, now func() time.Time) *Limiter {
	opts = withDefaults(opts)
	clk := newClock(now)
	l := &Limiter{
		opts:     opts,
		rule:     timeRule{Timeout: opts.StoreTimeout},
		failures: newFailureLog(opts.Logger, clk, opts.BreakerCooldown),
		mistakes: newThrottledLog(opts.Logger, clk),
		badPlans: newThrottledLog(opts.Logger, clk),
		shadowed: newThrottledLog(opts.Logger, clk),
		clock:    clk,
	}
	h := headerSwitches{legacy: !opts.DisableLegacyHeaders, draft: !opts.DisableDraftHeaders, shadow: opts.Shadow,
		inFlight: opts.Algorithm == InFlight}
	l.policy = newPolicyHeaders(opts.Name, opts.Limit, opts.Window, h)
	l.fallbackPolicy = newPolicyHeaders(opts.Name, opts.FallbackLimit, opts.Window, h)
	l.quotas, _ = newQuotaSet("Quotas", opts.Quotas, policyName(opts.Name)) // checked by withDefaults
	if opts.Fallback != nil {
		l.quotas = l.quotas.withFallback(l.fallbackLimit)
	}
	l.prefix = cmp.Or(keyPrefix(opts.Name), unnamedPrefix)
	var burst int64
	if opts.Algorithm == TokenBucket {
		burst = int64(cmp.Or(opts.Burst, opts.Limit))
	}
	l.own = l.newPlan(int64(opts.Limit), opts.Window, burst, l.quotas)
	l.probe = l.planAt(1, time.Millisecond, burst, l.quotas.probeSet())
	l.attach()
	if opts.Metrics != nil && !opts.Metrics.attached.CompareAndSwap(false, true) {
		panic("ratelimit: Metrics is already used by another limiter")
	}
	// Slots come back whenever a request ends: a refusal says nothing of
	// the next request, so InFlight caches none.
	if !l.info.Local && !opts.DisableOverLimitCache && opts.Algorithm != InFlight {
		l.refusals = newRefusals()
	}
	if !l.info.Local && l.fallback != nil && opts.Algorithm != InFlight {
		l.usage = newUsageMemory(keysBound(opts.Fallback), opts.Metrics)
		if l.features.Has(store.GiveBack) { // a store that cannot give back cannot be charged
			l.owed = owed.New[owedReq, under](keysBound(opts.Fallback), opts.Metrics.owedChanged)
		}
		if opts.Algorithm == TokenBucket {
			l.turns = turns.New(keysBound(opts.Fallback))
		}
	}
	if !l.info.Local {
		// A local store is called without one: it never waits.
		l.breakers = breaker.NewSet(func(node string) *breaker.Breaker {
			opts.Metrics.breakerMade()
			return breaker.New(opts.BreakerFailures, opts.BreakerCooldown, clk.elapsed, l.failures.Write, opts.Metrics.breakerChanged, node)
		})
	}
	l.wiring = door.Wiring{InFlight: opts.Algorithm == InFlight, Local: l.info.Local, Unreadable: l.unreadable,
		BadCostAfter: l.badCostAfter}
	l.wiring.CostErr, l.wiring.GiveErr = l.lacks("costs need", store.Costs, false), l.lacks("giving back needs", store.GiveBack, false)
	l.wiring.DelayErr = l.waitErr()
	return l
}

// attach attaches the limiter to Options.Counter and Options.Fallback
// (store.Store's Attach), panicking with a store's refusal, and refuses the
// options a store cannot serve (features.go).
func (l *Limiter) attach() {
	opts := &l.opts
	l.store = opts.Counter
	if opts.Fallback != nil {
		l.fallback = opts.Fallback
	}
	if opts.Leases {
		l.leases = newLeaseStore(l.store, opts.Metrics, l.clock.mono, opts.StoreTimeout)
		l.store = l.leases
	}
	info, err := l.store.Attach(&l.own.Budget, opts.PlanFor != nil)
	if err != nil {
		panic(err.Error())
	}
	l.info, l.features = info, info.Features
	if l.fallback != nil {
		info, err := l.fallback.Attach(&l.own.fallback.Budget, opts.PlanFor != nil)
		if err != nil {
			panic(err.Error())
		}
		l.fallbackFeatures = info.Features
	}
	l.checkFeatures()
}

// Take counts one request of tenant and decides it. tenant "" is a request
// without a tenant; all of those share one budget, under "rl:unknown" (see
// TakeAddr for keying them apart). ctx bounds the wait for the counter,
// within Options.StoreTimeout.
//
// Take always decides: when the counter fails it falls back, or fails open
// or closed, as Options say, and logs. It never waits past
// Options.StoreTimeout (10 × that while the counter has never answered).
// When ctx is done before the counter decides, the request is decided as
// one that nothing counted, with ErrContextDone in Decision.Err.
func (l *Limiter) Take(ctx context.Context, tenant string) (d Decision) {
	l.take(ctx, &d, tenant, 1)
	return d
}

// TakeN is Take for a request that costs n units of the budget: it is
// allowed when n fits in what is left, and a refused one spends nothing. A
// cost above the limit is refused at once, without asking the counter. A
// cost below 1 is the gateway's mistake: it counts as 1, and is logged. A
// cost above 1 needs a store that decides costs; with a CounterStore,
// such a request is decided as a counter failure.
func (l *Limiter) TakeN(ctx context.Context, tenant string, n int) (d Decision) {
	l.take(ctx, &d, tenant, n)
	return d
}

// TakeAddr is Take for a request without a tenant, keyed by its client's
// address: an IPv4 address as a whole, an IPv6 one by its
// Options.IPv6Prefix. An IPv4-mapped IPv6 address counts as the IPv4 one;
// an invalid address counts under "rl:unknown", as Take(ctx, "") does.
// Only an address the gateway can vouch for belongs here (behind a proxy,
// one read from a header that only the proxy writes: see
// Config.AnonymousByIP and HTTPConfig.ClientIP): a client that picks its
// address picks its budget.
func (l *Limiter) TakeAddr(ctx context.Context, addr netip.Addr) (d Decision) {
	return l.TakeAddrN(ctx, addr, 1)
}

// TakeAddrN is TakeAddr for a request that costs n units, as TakeN is.
func (l *Limiter) TakeAddrN(ctx context.Context, addr netip.Addr, n int) (d Decision) {
	l.takeAddr(ctx, &d, addr, n)
	return d
}

// takeAddr is TakeAddrN into d, for Middleware, which keeps its Decision
// on its caller's stack.
func (l *Limiter) takeAddr(ctx context.Context, d *Decision, addr netip.Addr, cost int) {
	r := l.newAddrRequest(addr, l.clock.mono())
	l.takeAny(ctx, d, r, cost)
	r.free()
}

// take decides into d the request of tenant, of cost. It fills d in
// place: copying a Decision out of each call cost the in-memory path about
// 40 instructions a request.
//
// The usual request, of cost 1 on a local store without plans, quotas or
// slots, runs a few lines of code of its own; everything else is in
// takeAny. Each call in a function reloads its arguments, so a function
// that calls for every rare case is long, and the code of one request had
// outgrown the instruction cache: takeAny keeps those calls away.
func (l *Limiter) take(ctx context.Context, d *Decision, tenant string, cost int) {
	r := l.newRequest(tenant, l.clock.mono())
	defer r.free()
	if !l.info.Local || cost != 1 || l.opts.PlanFor != nil || l.quotas != nil || l.opts.Algorithm == InFlight {
		l.takeAny(ctx, d, r, cost)
		return
	}
	// Nothing to time or break: a local store never waits.
	res := r.result()
	if err := l.store.Take(ctx, &r.Request, res); err != nil {
		l.failed(ctx, d, r, err)
		return
	}
	l.counted(d, &l.policy, ByCounter, r, res, nil)
	l.decided(d, r)
}

// takeAny is take for any request, r holding the limiter's own budget.
func (l *Limiter) takeAny(ctx context.Context, d *Decision, r *request, cost int) {
	if r.Algorithm == InFlight {
		r.Slot = slotSeq.Add(1)
	}
	if cost != 1 {
		l.setCost(r, cost)
	}
	if l.opts.PlanFor != nil {
		l.planned(r)
	}
	r.onCalendar(l.clock)
	if r.Cost > r.Most() || r.set() != nil && r.set().neverFits(r.Cost) {
		// It never fits: no need to ask.
		l.neverFits(d, r)
		l.decided(d, r)
		return
	}
	if r.Cost != 1 && !l.features.Has(store.Costs) {
		// The gateway's mistake, not the counter's: the breaker is not told.
		l.failed(ctx, d, r, fmt.Errorf("ratelimit: %w", l.lacks(fmt.Sprintf("a cost of %d needs", r.Cost), store.Costs, true)))
		return
	}
	if !l.info.Local {
		l.takeFromStore(ctx, d, r)
		return
	}
	res := r.result()
	if err := l.store.Take(ctx, &r.Request, res); err != nil {
		l.failed(ctx, d, r, err)
		return
	}
	l.counted(d, &l.policy, ByCounter, r, res, nil)
	l.decided(d, r)
}

// setCost sets r's cost to cost, a request's cost other than 1: one below
// 1 is the gateway's mistake, logged, and counts as 1.
func (l *Limiter) setCost(r *request, cost int) {
	if cost < 1 {
		l.mistakes.Record(slog.LevelError, "ratelimit: a request's cost is below 1; it counts as 1",
			slog.String("tenant", logTenant(r.Tenant)), slog.Int("cost", cost))
		return
	}
	r.Cost = int64(cost)
}

// badCostAfter logs a cost below 0 that a door's CostAfter returned: the
// gateway's mistake, after which the request keeps the cost it was
// decided with.
func (l *Limiter) badCostAfter(tenant string, cost int) {
	l.mistakes.Record(slog.LevelError, "ratelimit: CostAfter returned a cost below 0; the request keeps the cost it was decided with",
		slog.String("tenant", logTenant(tenant)), slog.Int("cost", cost))
}

// planned sets r to its tenant's plan. A plan that cannot be (or a
// PlanFor that panics) is the gateway's mistake: it is logged, and r
// keeps the limiter's own budget, so that no bad plan means unlimited.
func (l *Limiter) planned(r *request) {
	if err := l.plan(r); err != nil {
		l.badPlans.Record(slog.LevelError, "ratelimit: PlanFor gave no valid plan; the request is decided by the limiter's own Limit, Window and Quotas",
			slog.String("tenant", logTenant(r.Tenant)), slog.Any("err", err))
	}
}

// plan sets r's budget to its tenant's plan, or returns why it cannot,
// leaving r as it was.
func (l *Limiter) plan(r *request) error {
	p, err := l.planFor(r.Tenant)
	if err != nil {
		return err
	}
	if p.Limit == 0 && p.Window == 0 && p.Quotas == nil && p.Burst == 0 {
		return nil
	}
	if err := p.check(l.opts.Algorithm); err != nil {
		return err
	}
	if len(p.Quotas) > 0 && l.opts.Algorithm == InFlight {
		return errors.New("ratelimit: Plan.Quotas: an InFlight limiter has no quotas")
	}
	set := l.quotas
	if p.Quotas != nil && len(p.Quotas) == 0 {
		set = nil
	} else if p.Quotas != nil {
		set, err = l.planQuotas.get(p.Quotas, func() (*quotaSet, error) {
			s, err := newQuotaSet("Plan.Quotas", p.Quotas, l.policy.policy)
			if err == nil && s != nil {
				if lack := l.lacks("Plan.Quotas need", s.needs(), false); lack != nil {
					err = fmt.Errorf("ratelimit: %w", lack)
				}
			}
			if err == nil && s != nil && l.opts.Fallback != nil {
				s = s.withFallback(l.fallbackLimit)
			}
			return s, err
		})
		if err != nil {
			return err
		}
	}
	k := planKey{limit: cmp.Or(int64(p.Limit), l.own.Limit), window: cmp.Or(p.Window, l.own.Window), set: set}
	if l.opts.Algorithm == TokenBucket {
		// The plan's Burst, else Options.Burst, else the plan's Limit.
		k.burst = int64(cmp.Or(p.Burst, l.opts.Burst, p.Limit, l.opts.Limit))
	}
	r.setPlan(l.plans.get(k, l.newPlan))
	return nil
}

// planFor is Options.PlanFor's plan of tenant, or, when it panics, an
// error saying so.
func (l *Limiter) planFor(tenant string) (p Plan, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("ratelimit: PlanFor panicked: %v", v)
		}
	}()
	return l.opts.PlanFor(tenant), nil
}

// unreadable logs a tenant of type typ that a door cannot read, one line
// a second at most for each such type, so that one type's lines never hide
// another's. The types are the gateway's own, a handful at most.
func (l *Limiter) unreadable(typ reflect.Type) {
	log, ok := l.unreadableTypes.Load(typ)
	if !ok {
		log, _ = l.unreadableTypes.LoadOrStore(typ, newThrottledLog(l.opts.Logger, l.clock))
	}
	log.(*throttledLog).Record(slog.LevelError, "ratelimit: the request's tenant is of a type the limiter cannot read; it counts as a request without a tenant",
		slog.String("type", typ.String()),
		slog.String("fix", "store the tenant as a string, an integer or a fmt.Stringer (in c.Locals(\"tenant\") for Fiber), or set the middleware's Tenant"))
}

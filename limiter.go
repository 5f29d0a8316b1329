package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limiter decides whether a request is within its tenant's budget: Limit
// requests (or units of cost) per Window, or the tenant's own Plan,
// counted in Options.Counter by Options.Algorithm. It holds the whole
// decision (keys, plans, time budget, breaker, fallback, shadow mode, log,
// metrics); a middleware only reads the tenant and the cost from a
// request and writes the Decision into the response. A Limiter is safe for
// concurrent use by multiple goroutines.
type Limiter struct {
	opts     Options
	mem      *MemoryCounter // opts.Counter, when it is one
	fallback *MemoryCounter // opts.Fallback, when it is one
	breakers *breakers
	nodes    nodeCounter // opts.Counter, when its keys live on several nodes
	rule     timeRule

	// The throttled logs: counter failures, the gateway's own mistakes (a
	// bad plan, a cost below 1), and shadow mode's would-be refusals.
	failures, mistakes, shadowed *throttledLog
	refusals                     *refusals // nil when off, or for a MemoryCounter
	keyPrefix                    string    // from keyPrefix(opts.Name)

	// Read once per request that asks a counter other than a
	// MemoryCounter.
	clock clock

	// The counter counts by transactions, and the limiter has said so.
	byTransaction atomic.Bool

	// The throttled log of each type of tenant that TenantID cannot read.
	unreadableTypes sync.Map // reflect.Type → *throttledLog

	// The budgets a decision is made against, with their header values
	// formatted once.
	policy, fallbackPolicy policyHeaders

	// Options.Quotas, checked (nil for none), and those of the plans that
	// PlanFor returns.
	quotas     *quotaSet
	planQuotas planQuotas
}

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
	// is; 0 when nothing counted the request. For InFlight it is always 1
	// second, a hint: a slot frees whenever a request ends.
	Reset time.Duration

	// RetryAfter is, for a request that a counter refused, how long until
	// a request of the same cost would fit: the time the fixed window has
	// left, or until the sliding window's count has fallen enough. 0 when
	// allowed, or when the cost passes Limit and never fits.
	RetryAfter time.Duration

	// Shadowed reports that the limiter, in Options.Shadow mode, let
	// through a request it would have refused (429, or 503 with
	// FailClosed). Allowed is then true.
	Shadowed bool

	// Err is why Options.Counter could not decide, when By is not
	// ByCounter: the counter's failure, which the Limiter has logged, or
	// ErrContextDone, the request's own context ending first, which it
	// has not. It is for logs and metrics, never for a client.
	Err error

	policy *policyHeaders

	// With quotas: the tenant's quotas, every limit's figures (the main
	// one first), and the limit that Limit, Window and the rest are of:
	// 0 the main one, i+1 quota i.
	quotas *quotaSet
	lims   [maxQuotas + 1]figure
	named  int

	// What Limiter.Release gives back: took says the request was counted
	// and allowed; then cost, in the windows that marks name (see take),
	// or the slots of slot, under the key of tenant, or of addr.
	took   bool
	byAddr bool
	tenant string
	addr   netip.Addr
	cost   int64
	slot   uint64
	marks  [maxQuotas + 1]int64
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

// Policy returns the name of the limit that d's figures (Limit, Window,
// Remaining, Reset, RetryAfter) are of, as the RateLimit header fields
// name it: the limiter's Options.Name, or "default", for the main limit,
// or a quota's Name. With quotas it is the limit that refused the request
// (of several, the one with room again last), or when allowed the one
// with the fewest units left (of those, the one that resets last).
func (d *Decision) Policy() string {
	if d.policy == nil {
		return ""
	}
	if d.named > 0 {
		return d.quotas.q[d.named-1].name
	}
	return d.policy.policy
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

// misconfigured is an error that says the store is set up wrong rather
// than down: a wrong password, a missing permission, an unknown database,
// a key that holds something else. The limiter logs it as such, with what
// to fix, and counts it apart; the request is decided as for any failure.
type misconfigured interface {
	error
	fix() string
}

// errBreakerOpen: the request was decided without asking the counter.
var errBreakerOpen = errors.New("ratelimit: circuit breaker open")

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
		opts:      opts,
		rule:      timeRule{timeout: opts.StoreTimeout},
		failures:  newThrottledLog(opts.Logger, clk),
		mistakes:  newThrottledLog(opts.Logger, clk),
		shadowed:  newThrottledLog(opts.Logger, clk),
		keyPrefix: keyPrefix(opts.Name),
		clock:     clk,
	}
	h := headerSwitches{legacy: !opts.DisableLegacyHeaders, draft: !opts.DisableDraftHeaders, shadow: opts.Shadow,
		inFlight: opts.Algorithm == InFlight}
	l.policy = newPolicyHeaders(opts.Name, opts.Limit, opts.Window, h)
	l.fallbackPolicy = newPolicyHeaders(opts.Name, opts.FallbackLimit, opts.Window, h)
	l.quotas, _ = newQuotaSet("Quotas", opts.Quotas, policyName(opts.Name)) // checked by withDefaults
	if opts.Fallback != nil {
		l.quotas = l.quotas.withFallback(l.fallbackLimit)
	}
	l.mem, _ = opts.Counter.(*MemoryCounter)
	l.fallback, _ = opts.Fallback.(*MemoryCounter)
	// Slots come back whenever a request ends: a refusal says nothing of
	// the next request, so InFlight caches none.
	if l.mem == nil && !opts.DisableOverLimitCache && opts.Algorithm != InFlight {
		l.refusals = newRefusals()
	}
	if l.mem == nil {
		// A MemoryCounter is called without one: it never waits, and
		// fails only once closed.
		l.breakers = newBreakers(func(node string) *breaker {
			return newBreaker(opts.BreakerFailures, opts.BreakerCooldown, clk, l.failures.write, opts.Metrics, node)
		})
	}
	if nc, ok := opts.Counter.(nodeCounter); ok && nc.manyNodes() {
		l.nodes = nc
	}
	return l
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
	l.takeTenant(ctx, &d, tenant, 1)
	return d
}

// TakeN is Take for a request that costs n units of the budget: it is
// allowed when n fits in what is left, and a refused one spends nothing. A
// cost above the limit is refused at once, without asking the counter. A
// cost below 1 is the gateway's mistake: it counts as 1, and is logged. A
// cost above 1 needs a MemoryCounter or a RedisCounter (see CheckCost);
// with a Counter of your own, such a request is decided as a counter
// failure.
func (l *Limiter) TakeN(ctx context.Context, tenant string, n int) (d Decision) {
	l.takeTenant(ctx, &d, tenant, n)
	return d
}

// takeTenant is TakeN into d, for the doors of this package, which keep
// their Decision on their own stack.
func (l *Limiter) takeTenant(ctx context.Context, d *Decision, tenant string, cost int) {
	// The key is built on the stack: a MemoryCounter looks it up without
	// allocating, and any other counter gets a copy of its own.
	var buf [maxKeyLen]byte
	l.take(ctx, d, tenant, appendKey(buf[:0], l.keyPrefix, tenant, l.opts.Algorithm), cost)
	if d.took {
		d.tenant = tenant
	}
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

// takeAddr is TakeAddrN into d, as takeTenant is TakeN.
func (l *Limiter) takeAddr(ctx context.Context, d *Decision, addr netip.Addr, n int) {
	var buf [maxKeyLen]byte
	l.take(ctx, d, "", appendAddrKey(buf[:0], l.keyPrefix, addr, l.opts.IPv6Prefix, l.opts.Algorithm), n)
	if d.took {
		d.byAddr, d.addr = true, addr
	}
}

// TenantID returns the tenant ID that v stands for, v being what a request
// carries for its tenant, such as Fiber's c.Locals("tenant"): a string, the
// String of a fmt.Stringer, or an integer in decimal, of a type of its own
// or not (type TenantID int64). nil and "" are no
// tenant. A value of any other type is no tenant either, and is logged
// with its type, one line a second at most: it is the gateway's mistake,
// which would otherwise put every such tenant into the one budget of
// requests without a tenant.
func (l *Limiter) TenantID(v any) (string, bool) {
	var id string
	switch t := v.(type) {
	case string:
		id = t
	case nil:
	case fmt.Stringer:
		id = t.String()
	default:
		// Types of the gateway's own: type TenantID int64, say.
		switch rv := reflect.ValueOf(v); rv.Kind() {
		case reflect.String:
			id = rv.String()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			id = strconv.FormatInt(rv.Int(), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			id = strconv.FormatUint(rv.Uint(), 10)
		default:
			l.unreadable(rv.Type())
		}
	}
	return id, id != ""
}

// unreadable logs a tenant of type typ that TenantID cannot read, one line
// a second at most for each such type, so that one type's lines never hide
// another's. The types are the gateway's own, a handful at most.
func (l *Limiter) unreadable(typ reflect.Type) {
	log, ok := l.unreadableTypes.Load(typ)
	if !ok {
		log, _ = l.unreadableTypes.LoadOrStore(typ, newThrottledLog(l.opts.Logger, l.clock))
	}
	log.(*throttledLog).record(slog.LevelError, "ratelimit: the request's tenant is of a type the limiter cannot read; it counts as a request without a tenant",
		slog.String("type", typ.String()),
		slog.String("fix", "store the tenant as a string, an integer or a fmt.Stringer (in c.Locals(\"tenant\") for Fiber), or set the middleware's Tenant"))
}

// CheckCost returns nil when the limiter can count requests of any cost
// (TakeN), and otherwise an error that names the counter that cannot: a
// Counter of your own counts one request at a time, by Incr. A middleware
// with a Cost function calls it at setup and panics with the error.
func (l *Limiter) CheckCost() error {
	for _, c := range []struct {
		field string
		c     Counter
	}{{"Counter", l.opts.Counter}, {"Fallback", l.opts.Fallback}} {
		if c.c != nil && !decides(c.c) {
			return fmt.Errorf("ratelimit: costs need %s to be a MemoryCounter or a RedisCounter; %T counts one request at a time", c.field, c.c)
		}
	}
	return nil
}

// Ping checks that the limiter's counter works, for a gateway to call at
// start-up, before it serves: that Redis can be reached on every server
// its client knows, accepts the client's credentials and database, and
// lets it run what the limiter runs on its keys (a request on a key of its
// own that no tenant has, in the limiter's algorithm, with its
// Options.Quotas). The error carries
// the server's own words (NOAUTH, WRONGPASS, NOPERM, an unknown database)
// and what to fix: a misconfigured store then fails the deployment, rather
// than fail open request after request. ctx bounds the check. A
// MemoryCounter passes unless closed; a Counter of your own is not
// checked.
func (l *Limiter) Ping(ctx context.Context) error {
	var buf [maxKeyLen]byte
	t := take{key: string(appendProbeKey(buf[:0], l.keyPrefix, l.opts.Algorithm)),
		cost: 1, limit: 1, window: time.Millisecond, algo: l.opts.Algorithm}
	if l.quotas != nil {
		// The quotas' commands too, on keys of the probe's own; at a
		// limit of 1, a month's key holds 1 until the month ends.
		t.quotas = l.quotas.probe
	}
	var err error
	switch c := l.opts.Counter.(type) {
	case *MemoryCounter:
		if c.closed.Load() {
			err = ErrClosed
		}
	case pinger:
		t, err = c.ping(ctx, t)
		if err == nil && t.byTransaction {
			l.countsByTransaction()
		}
	}
	if m, ok := errors.AsType[misconfigured](err); ok {
		return fmt.Errorf("ratelimit: the counter failed its check: %w; to fix: %s", err, m.fix())
	}
	if err != nil {
		return fmt.Errorf("ratelimit: the counter failed its check: %w", err)
	}
	return nil
}

// pinger is a counter that can check itself (see Limiter.Ping) by deciding
// t, a request on a key that no tenant has.
type pinger interface {
	ping(ctx context.Context, t take) (take, error)
}

var _ pinger = (*RedisCounter)(nil)

// countsByTransaction says once, at warning level, that the counter
// counts without its script (see noscript.go), and what that changes.
func (l *Limiter) countsByTransaction() {
	if l.byTransaction.Load() || !l.byTransaction.CompareAndSwap(false, true) {
		return
	}
	var refusal error
	if r, ok := l.opts.Counter.(interface{ scriptRefusal() error }); ok {
		refusal = r.scriptRefusal()
	}
	l.failures.write(slog.LevelWarn, "ratelimit: the server refuses scripts, so fixed windows count by MULTI/EXEC: "+
		"exact, but a refused request's cost stays counted, so a tenant that keeps knocking over its limit keeps its window full",
		slog.String("fix", "grant the user "+aclFixed+" to decide in the store"), slog.Any("err", refusal))
}

// take decides into d the request of tenant (for its plan and the log), of
// cost, counted under key kb. It fills d in place: copying a Decision out
// of each call cost the in-memory path about 40 instructions a request.
//
// The usual request, of cost 1 on a MemoryCounter without plans, quotas
// or slots, runs a few lines of code of its own; everything else is in
// takeAny. Each call in a function reloads its arguments, so a function
// that calls for every rare case is long, and the code of one request
// had outgrown the instruction cache: takeAny keeps those calls away.
func (l *Limiter) take(ctx context.Context, d *Decision, tenant string, kb []byte, cost int) {
	// Field by field: a composite literal of a take is built aside and
	// copied, which cost the in-memory path about 150 instructions.
	var t take
	t.cost, t.limit, t.window, t.algo, t.quotas = 1, int64(l.opts.Limit), l.opts.Window, l.opts.Algorithm, l.quotas
	if l.mem == nil || cost != 1 || l.opts.PlanFor != nil || t.quotas != nil || t.algo == InFlight {
		l.takeAny(ctx, d, tenant, kb, cost, &t)
		return
	}
	// A cost of 1 always fits a limit. Nothing to time or break: a
	// MemoryCounter never waits, and fails only once closed.
	if err := l.mem.take(kb, &t); err != nil {
		l.failed(ctx, d, tenant, kb, &t, err)
		return
	}
	l.counted(d, &l.policy, ByCounter, &t, nil)
	l.decided(d, tenant, kb)
}

// takeAny is take for any request, t holding the limiter's own budget.
func (l *Limiter) takeAny(ctx context.Context, d *Decision, tenant string, kb []byte, cost int, t *take) {
	if t.algo == InFlight {
		t.slot = slotSeq.Add(1)
	}
	if cost != 1 {
		l.setCost(t, tenant, cost)
	}
	if l.opts.PlanFor != nil && !l.planned(ctx, d, tenant, kb, t) {
		return
	}
	if t.cost > t.limit || t.quotas != nil && t.quotas.neverFits(t.cost) {
		// It never fits: no need to ask.
		l.neverFits(d, t)
		l.decided(d, tenant, kb)
		return
	}
	if l.mem == nil {
		l.takeFromStore(ctx, d, tenant, kb, t)
		return
	}
	// Nothing to time or break: a MemoryCounter never waits, and fails
	// only once closed.
	var err error
	if t.quotas != nil {
		err = l.mem.takeGroup(kb, t)
	} else {
		err = l.mem.take(kb, t)
	}
	if err != nil {
		l.failed(ctx, d, tenant, kb, t, err)
		return
	}
	l.counted(d, &l.policy, ByCounter, t, nil)
	l.decided(d, tenant, kb)
}

// setCost sets t's cost to cost, a request's cost other than 1: one below
// 1 is the gateway's mistake, logged, and counts as 1.
func (l *Limiter) setCost(t *take, tenant string, cost int) {
	if cost < 1 {
		l.mistakes.record(slog.LevelError, "ratelimit: a request's cost is below 1; it counts as 1",
			slog.String("tenant", logTenant(tenant)), slog.Int("cost", cost))
		return
	}
	t.cost = int64(cost)
}

// planned sets t to tenant's plan and reports whether it has one that can
// be; for one that cannot, it logs the gateway's mistake and decides into
// d as for a counter failure.
func (l *Limiter) planned(ctx context.Context, d *Decision, tenant string, kb []byte, t *take) bool {
	err := l.plan(tenant, t)
	if err == nil {
		return true
	}
	l.mistakes.record(slog.LevelError, "ratelimit: PlanFor returned an invalid plan; the request is decided as a counter failure",
		slog.String("tenant", logTenant(tenant)), slog.Any("err", err))
	l.failed(ctx, d, tenant, kb, t, err)
	return false
}

// takeFromStore decides t in Options.Counter, which is not a
// MemoryCounter: the over-limit cache first, then a call through the
// breaker, timed.
func (l *Limiter) takeFromStore(ctx context.Context, d *Decision, tenant string, kb []byte, t *take) {
	now := l.clock.Now()
	since := l.clock.since(now)
	if l.refusals != nil && l.refusals.refuse(kb, t, since) {
		l.counted(d, &l.policy, ByCache, t, nil)
		l.decided(d, tenant, kb)
		return
	}
	t.key = counterKey(kb, t.quotas)
	err := l.ask(ctx, t, now)
	if err == nil && !t.allowed && l.refusals != nil {
		l.refusals.add(kb, t, since)
	}
	if t.byTransaction {
		l.countsByTransaction()
	}
	if err != nil {
		l.failed(ctx, d, tenant, kb, t, err)
		return
	}
	l.counted(d, &l.policy, ByCounter, t, nil)
	l.decided(d, tenant, kb)
}

// counterKey is the key a counter other than a MemoryCounter is asked
// about, for the key kb with quotas: the tenant's hash of limits, made
// once here, or kb itself.
func counterKey(kb []byte, quotas *quotaSet) string {
	if quotas != nil {
		return quotaHash(kb)
	}
	return string(kb)
}

// plan sets t's limit, window and quotas to tenant's plan.
func (l *Limiter) plan(tenant string, t *take) error {
	p := l.opts.PlanFor(tenant)
	if p.Limit == 0 && p.Window == 0 && p.Quotas == nil {
		return nil
	}
	if err := p.check(); err != nil {
		return err
	}
	if len(p.Quotas) > 0 && t.algo == InFlight {
		return errors.New("ratelimit: Plan.Quotas: an InFlight limiter has no quotas")
	}
	if p.Quotas != nil && len(p.Quotas) == 0 {
		t.quotas = nil
	} else if p.Quotas != nil {
		s, err := l.planQuotas.get(p.Quotas, func() (*quotaSet, error) {
			s, err := newQuotaSet("Plan.Quotas", p.Quotas, l.policy.policy)
			if err == nil && s != nil && !decides(l.opts.Counter) {
				err = fmt.Errorf("ratelimit: Plan.Quotas need Counter to be a MemoryCounter or a RedisCounter; %T counts by Incr alone", l.opts.Counter)
			}
			if err == nil && s != nil && l.opts.Fallback != nil {
				if !decides(l.opts.Fallback) {
					err = fmt.Errorf("ratelimit: Plan.Quotas need Fallback to be a MemoryCounter or a RedisCounter; %T counts by Incr alone", l.opts.Fallback)
				}
				s = s.withFallback(l.fallbackLimit)
			}
			return s, err
		})
		if err != nil {
			return err
		}
		t.quotas = s
	}
	if p.Limit != 0 {
		t.limit = int64(p.Limit)
	}
	if p.Window != 0 {
		t.window = p.Window
	}
	return nil
}

// failed decides into d the request t that Options.Counter could not
// decide, for err: by the fallback, or failing open or closed.
func (l *Limiter) failed(ctx context.Context, d *Decision, tenant string, kb []byte, t *take, err error) {
	if errors.Is(err, ErrContextDone) {
		// The request's own doing: nothing to say of the counter, and no
		// fallback's count to spend for a client that is gone.
		l.uncounted(d, tenant, kb, t, err)
		return
	}
	lastResort := "fail open"
	if l.opts.FailClosed {
		lastResort = "fail closed"
	}
	if err != errBreakerOpen { // the breaker logged when it opened
		action := lastResort
		if l.opts.Fallback != nil {
			action = "fallback"
		}
		if m, ok := errors.AsType[misconfigured](err); ok {
			l.failures.record(slog.LevelError, "ratelimit: the counter is misconfigured, request decided by "+action,
				slog.String("fix", m.fix()), slog.String("tenant", logTenant(tenant)), slog.String("key", string(kb)), slog.Any("err", err))
		} else {
			l.failures.record(slog.LevelError, "ratelimit: counter failed, request decided by "+action,
				slog.String("tenant", logTenant(tenant)), slog.String("key", string(kb)), slog.Any("err", err))
		}
	}
	if l.opts.Fallback != nil {
		f := take{key: string(kb), cost: t.cost, window: t.window, algo: t.algo, limit: l.fallbackLimit(t.limit), slot: t.slot}
		if t.quotas != nil {
			f.quotas = t.quotas.fallback
		}
		f, ferr := l.askFallback(ctx, kb, f)
		if ferr == nil {
			l.counted(d, &l.fallbackPolicy, ByFallback, &f, err)
			l.decided(d, tenant, kb)
			return
		}
		if ctx.Err() == nil { // else the request gave up: not the fallback's failure
			l.failures.record(slog.LevelError, "ratelimit: counter failed, request decided by "+lastResort,
				slog.String("tenant", logTenant(tenant)), slog.String("key", string(kb)), slog.Any("err", ferr))
		}
		err = fmt.Errorf("%w; fallback: %w", err, ferr)
	}
	l.uncounted(d, tenant, kb, t, err)
}

// uncounted decides into d the request t that nothing counted, for err:
// let through, or refused with Options.FailClosed. Only the limit and the
// policy are known.
func (l *Limiter) uncounted(d *Decision, tenant string, kb []byte, t *take, err error) {
	*d = Decision{Allowed: !l.opts.FailClosed, By: ByNone, Limit: int(t.limit), Window: t.window, Remaining: -1,
		Err: err, policy: &l.policy}
	l.unknownFigures(d, t)
	l.decided(d, tenant, kb)
}

// unknownFigures gives d, a decision of t without counts, its quotas'
// limits and windows, a calendar period's on the limiter's clock.
func (l *Limiter) unknownFigures(d *Decision, t *take) {
	if t.quotas == nil {
		return
	}
	d.quotas = t.quotas
	d.lims[0] = figure{limit: t.limit, window: t.window, remaining: -1}
	for i, q := range t.quotas.q {
		w := q.window
		if q.calendar != 0 {
			start, end := q.calendar.period(l.clock.Now())
			w = end.Sub(start)
		}
		d.lims[i+1] = figure{limit: q.limit, window: w, remaining: -1}
	}
}

// neverFits decides into d the request t whose cost passes one of its
// limits, which it is refused by: the first such, the main one first.
func (l *Limiter) neverFits(d *Decision, t *take) {
	*d = Decision{By: ByCounter, Limit: int(t.limit), Window: t.window, Remaining: -1, policy: &l.policy, cost: t.cost}
	l.unknownFigures(d, t)
	if t.cost <= t.limit && t.quotas != nil {
		for i, q := range t.quotas.q {
			if t.cost > q.limit {
				d.named, d.Limit, d.Window = i+1, int(q.limit), d.lims[i+1].window
				break
			}
		}
	}
}

// fallbackLimit is the fallback's budget for a request whose budget is
// limit: FallbackLimit, in the proportion of a tenant's plan to Limit.
func (l *Limiter) fallbackLimit(limit int64) int64 {
	if limit == int64(l.opts.Limit) {
		return int64(l.opts.FallbackLimit)
	}
	scaled := math.Ceil(float64(limit) * float64(l.opts.FallbackLimit) / float64(l.opts.Limit))
	return int64(min(max(scaled, 1), maxLimit))
}

// askFallback decides f in Options.Fallback, which waits only as ctx lets
// it.
func (l *Limiter) askFallback(ctx context.Context, kb []byte, f take) (take, error) {
	if f.cost > f.limit {
		f.decided(false, 0, 0)
		f.remaining, f.reset, f.retry = 0, f.window, 0
		return f, nil
	}
	switch c := l.opts.Fallback.(type) {
	case *MemoryCounter:
		if f.quotas != nil {
			return f, c.takeGroup(kb, &f)
		}
		return f, c.take(kb, &f)
	case boundedTaker:
		deadline, _ := ctx.Deadline()
		return c.takeWithin(ctx, f, deadline, 0)
	}
	if f.cost != 1 {
		return f, fmt.Errorf("fallback %T counts one request at a time, not a cost of %d", l.opts.Fallback, f.cost)
	}
	return f, takeByIncr(ctx, l.opts.Fallback, &f)
}

// counted decides into d a request that a counter decided against p, as t
// says.
func (l *Limiter) counted(d *Decision, p *policyHeaders, by Decider, t *take, err error) {
	d.Allowed, d.By, d.Limit, d.Window = t.allowed, by, int(t.limit), t.window
	d.Remaining, d.Reset, d.RetryAfter = int(t.remaining), t.reset, t.retry
	d.Err, d.policy, d.quotas, d.named = err, p, t.quotas, 0
	d.took, d.cost = t.allowed && by != ByCache, t.cost
	if d.took {
		d.slot, d.marks = t.slot, t.marks
	}
	if t.algo == InFlight && t.expired > 0 {
		l.opts.Metrics.slotsExpired(t.expired)
	}
	if t.quotas != nil {
		d.quotaFigures(t)
	}
}

// quotaFigures gives d, decided as t with quotas says, every limit's
// figures, and the figures of the limit that names the decision (see
// Decision.Policy).
func (d *Decision) quotaFigures(t *take) {
	d.lims[0] = figure{limit: t.limit, window: t.window, remaining: t.remaining, reset: t.reset}
	retry := t.retry
	if !t.allowed && t.refusedBy&1 == 0 {
		retry = -1 // the main limit did not refuse it
	}
	for i, q := range t.quotas.q {
		a := &t.q[i]
		f := figure{limit: q.limit, window: a.period, remaining: a.remaining, reset: a.reset}
		d.lims[i+1] = f
		named := &d.lims[d.named]
		switch {
		case !t.allowed && t.refusedBy&(1<<(i+1)) != 0:
			if a.retry > retry {
				d.named, retry = i+1, a.retry
			}
		case !t.allowed:
		case f.remaining < named.remaining || f.remaining == named.remaining && f.reset > named.reset:
			d.named = i + 1
		}
	}
	f := d.lims[d.named]
	d.Limit, d.Window, d.Remaining, d.Reset = int(f.limit), f.window, int(f.remaining), f.reset
	d.RetryAfter = 0
	if !t.allowed {
		d.RetryAfter = retry
	}
}

// decided counts d in the metrics and, in shadow mode, lets a request
// that d refuses through.
func (l *Limiter) decided(d *Decision, tenant string, kb []byte) {
	if l.opts.Algorithm == InFlight && d.By != ByNone {
		l.opts.Metrics.slotsDecided(d.cost, d.took)
	}
	if l.opts.Shadow && !d.Allowed {
		l.shadow(d, tenant, kb)
		return
	}
	o := OutcomeAllowed
	switch {
	case d.By == ByNone && d.Allowed:
		o = OutcomeFailedOpen
	case d.By == ByNone:
		o = OutcomeFailedClosed
	case !d.Allowed:
		o = OutcomeLimited
	}
	l.opts.Metrics.decided(o, d.By)
}

// shadow lets through a request that d refuses, in shadow mode, and logs
// it.
func (l *Limiter) shadow(d *Decision, tenant string, kb []byte) {
	d.Allowed, d.Shadowed = true, true
	l.opts.Metrics.decided(OutcomeShadowLimited, d.By)
	l.shadowed.record(slog.LevelInfo, "ratelimit: shadow mode let through a request it would have refused",
		slog.String("tenant", logTenant(tenant)), slog.String("key", string(kb)),
		slog.Int("limit", d.Limit), slog.Int("remaining", d.Remaining), slog.String("decided by", d.By.String()))
}

// ask decides t in opts.Counter, through the breaker of its key's node.
// The breaker and the metrics' latency learn only what the counter did:
// a request whose own context ended (ErrContextDone) tells them nothing,
// and an answer about one key (keyAnswer) says that the server is up.
func (l *Limiter) ask(ctx context.Context, t *take, now time.Time) error {
	b := l.breakers.first
	if l.nodes != nil {
		var addr string
		t.node, addr = l.nodes.nodeOf(t.key)
		b = l.breakers.of(t.node, addr)
	}
	if t.cost > 1 && !decides(l.opts.Counter) {
		// The gateway's mistake, not the counter's: the breaker is not told.
		return fmt.Errorf("ratelimit: Counter %T counts one request at a time, not a cost of %d", l.opts.Counter, t.cost)
	}
	ok, probe := b.allow()
	if !ok {
		return errBreakerOpen
	}
	err := l.rule.call(ctx, l.opts.Counter, t, now)
	switch {
	case err == nil:
		b.success(probe)
	case errors.Is(err, ErrContextDone):
		b.abandoned(probe)
		l.opts.Metrics.canceled()
		return err
	case isKeyAnswer(err):
		b.success(probe) // the server answered, for this key
	default:
		b.failure(probe, err)
	}
	if m := l.opts.Metrics; m != nil {
		m.roundTrip(l.clock.Now().Sub(now), err == nil, causeOf(err))
	}
	return err
}

// causeOf is why err failed a round trip.
func causeOf(err error) Cause {
	if _, ok := errors.AsType[misconfigured](err); ok {
		return CauseConfiguration
	}
	if errors.Is(err, errTimedOut) || isTimeout(err) {
		return CauseTimeout
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return CauseRefused
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return CauseRefused
	}
	return CauseOther
}

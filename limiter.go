package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Limiter decides whether a request is within its tenant's budget: Limit
// requests per fixed Window, counted in Options.Counter. It holds the whole
// decision (keys, time budget, breaker, fallback, log, metrics); a front
// door only reads the tenant from a request and writes the Decision into
// the response. A Limiter is safe for concurrent use by multiple
// goroutines.
type Limiter struct {
	opts      Options
	mem       *MemoryCounter // opts.Counter, when it is one
	breakers  *breakers
	nodes     nodeCounter // opts.Counter, when its keys live on several nodes
	failLog   failureLog
	rule      timeRule
	refusals  *refusals // nil when off, or for a MemoryCounter
	keyPrefix string    // from keyPrefix(opts.Name)

	// Read once per request that asks a counter other than a
	// MemoryCounter.
	clock clock

	// The budgets a decision is made against, with their header values
	// formatted once.
	policy, fallbackPolicy policyHeaders
}

// Decision is how a Limiter decided one request, with the figures the
// response reports.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool

	// By says what decided.
	By Decider

	// Limit is the budget the request was counted against: Options.Limit,
	// or Options.FallbackLimit when the fallback decided.
	Limit int

	// Remaining is how many more requests the window allows, 0 once over
	// budget; -1 when nothing counted the request (By is ByNone).
	Remaining int

	// Reset is the time the window has left; 0 when nothing counted the
	// request.
	Reset time.Duration

	// Err is why Options.Counter could not decide, when By is not
	// ByCounter; the Limiter has logged it. It is for logs and metrics,
	// never for a client.
	Err error

	policy *policyHeaders
}

// Decider is what decided a request.
type Decider int

const (
	// ByCounter: Options.Counter counted the request (or the over-limit
	// cache refused it, from what the counter reported).
	ByCounter Decider = iota
	// ByFallback: the counter failed or the breaker is open, and
	// Options.Fallback counted the request against FallbackLimit.
	ByFallback
	// ByNone: nothing could count the request; it was let through, or
	// refused with Options.FailClosed. A door answers the refusal 503, not
	// 429.
	ByNone
)

// Policy returns the name of the policy d was decided by, as the RateLimit
// header fields report it: the limiter's Options.Name, or "default".
func (d *Decision) Policy() string {
	if d.policy == nil {
		return ""
	}
	return d.policy.policy
}

// String returns "counter", "fallback" or "none".
func (d Decider) String() string {
	switch d {
	case ByCounter:
		return "counter"
	case ByFallback:
		return "fallback"
	case ByNone:
		return "none"
	}
	return "invalid"
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
		failLog:   failureLog{logger: opts.Logger, clock: clk},
		keyPrefix: keyPrefix(opts.Name),
		clock:     clk,
	}
	h := headerSwitches{legacy: !opts.DisableLegacyHeaders, draft: !opts.DisableDraftHeaders}
	l.policy = newPolicyHeaders(opts.Name, opts.Limit, opts.Window, h)
	l.fallbackPolicy = newPolicyHeaders(opts.Name, opts.FallbackLimit, opts.Window, h)
	l.mem, _ = opts.Counter.(*MemoryCounter)
	if l.mem == nil && !opts.DisableOverLimitCache {
		l.refusals = newRefusals()
	}
	l.breakers = newBreakers(func(node string) *breaker {
		return newBreaker(opts.BreakerFailures, opts.BreakerCooldown, clk, l.failLog.write, opts.Metrics, node)
	})
	if nc, ok := opts.Counter.(nodeCounter); ok && nc.manyNodes() {
		l.nodes = nc
	}
	l.failLog.last.Store(-int64(time.Second)) // the first failure is logged
	return l
}

// Take counts one request of tenant and decides it. tenant "" is a request
// without a tenant; all of those share one budget, under "rl:unknown" (see
// TakeAddr for keying them apart). ctx bounds the wait for the counter,
// within Options.StoreTimeout.
//
// Take always decides: when the counter fails it falls back, or fails open
// or closed, as Options say, and logs. It never blocks past the time rule
// of Options.StoreTimeout.
func (l *Limiter) Take(ctx context.Context, tenant string) (d Decision) {
	l.takeTenant(ctx, &d, tenant)
	return d
}

// takeTenant is Take into d, for the doors of this package, which keep
// their Decision on their own stack.
func (l *Limiter) takeTenant(ctx context.Context, d *Decision, tenant string) {
	// The key is built on the stack: a MemoryCounter looks it up without
	// allocating, and any other counter gets a copy of its own.
	var buf [maxKeyLen]byte
	l.take(ctx, d, tenant, appendKey(buf[:0], l.keyPrefix, tenant))
}

// TakeAddr is Take for a request without a tenant, keyed by its client's
// address: an IPv4 address as a whole, an IPv6 one by its
// Options.IPv6Prefix. An IPv4-mapped IPv6 address counts as the IPv4 one;
// an invalid address counts under "rl:unknown", as Take(ctx, "") does.
// Only an address the gateway can vouch for belongs here (see the README
// on proxies): a client that picks its address picks its budget.
func (l *Limiter) TakeAddr(ctx context.Context, addr netip.Addr) (d Decision) {
	var buf [maxKeyLen]byte
	l.take(ctx, &d, "", appendAddrKey(buf[:0], l.keyPrefix, addr, l.opts.IPv6Prefix))
	return d
}

// take decides into d the request of tenant (for the log) counted under
// key kb. It fills d in place: copying a Decision out of each call cost the
// in-memory path about 40 instructions a request.
func (l *Limiter) take(ctx context.Context, d *Decision, tenant string, kb []byte) {
	var (
		key   string
		count int64
		ttl   time.Duration
		err   error
	)
	if l.mem != nil {
		// Nothing to time or break: it never waits, and fails only once
		// closed.
		count, ttl, err = l.mem.incr(kb, int64(l.opts.Window))
	} else {
		now := l.clock.Now()
		since := l.clock.since(now)
		if l.refusals != nil {
			if left, ok := l.refusals.left(kb, since); ok {
				l.counted(d, &l.policy, ByCounter, int64(l.opts.Limit)+1, left, nil)
				return
			}
		}
		key = string(kb)
		count, ttl, err = l.ask(ctx, key, now)
		if err == nil && count > int64(l.opts.Limit) && l.refusals != nil && ttl > 0 {
			l.refusals.add(kb, since+ttl, since)
		}
	}
	if err == nil {
		l.counted(d, &l.policy, ByCounter, count, ttl, nil)
		return
	}

	// The counter could not decide.
	if key == "" {
		key = string(kb)
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
		l.failLog.record(err, tenant, key, action)
	}
	if l.opts.Fallback != nil {
		n, ttl, ferr := incrTTL(ctx, l.opts.Fallback, key, l.opts.Window)
		if ferr == nil && n <= 0 {
			ferr = fmt.Errorf("fallback counter returned %d for key %s", n, key)
		}
		if ferr == nil {
			l.counted(d, &l.fallbackPolicy, ByFallback, n, ttl, err)
			return
		}
		l.failLog.record(ferr, tenant, key, lastResort)
		err = fmt.Errorf("%w; fallback: %w", err, ferr)
	}
	// Nobody counted: only the limit and the policy are known.
	*d = Decision{Allowed: !l.opts.FailClosed, By: ByNone, Limit: l.opts.Limit, Remaining: -1,
		Err: err, policy: &l.policy}
	if d.Allowed {
		l.opts.Metrics.count(failedOpen)
	} else {
		l.opts.Metrics.count(failedClosed)
	}
}

// counted decides into d a request that a counter counted against p: count
// is its count and ttl the time its window has left.
func (l *Limiter) counted(d *Decision, p *policyHeaders, by Decider, count int64, ttl time.Duration, err error) {
	// A counter may report a nonsensical ttl; the window is then an upper
	// bound.
	if ttl < 0 {
		ttl = l.opts.Window
	}
	d.Allowed, d.By, d.Limit, d.Remaining = count <= p.limit, by, int(p.limit), int(max(p.limit-count, 0))
	d.Reset, d.Err, d.policy = ttl, err, p
	if m := l.opts.Metrics; m != nil {
		o := limited
		switch {
		case d.Allowed && by == ByCounter:
			o = allowed
		case d.Allowed:
			o = fallbackAllowed
		case by == ByFallback:
			o = fallbackLimited
		}
		m.count(o)
	}
}

// ask counts the request in opts.Counter, through the breaker of key's
// node.
func (l *Limiter) ask(ctx context.Context, key string, now time.Time) (int64, time.Duration, error) {
	b := l.breakers.first
	if l.nodes != nil {
		b = l.breakers.of(l.nodes.nodeOf(key))
	}
	ok, probe := b.allow()
	if !ok {
		return 0, 0, errBreakerOpen
	}
	n, ttl, err := l.rule.call(ctx, l.opts.Counter, key, l.opts.Window, now)
	if err == nil && n <= 0 {
		err = fmt.Errorf("increment rate limit key %s: counter returned %d", key, n)
	}
	if err != nil {
		b.failure(probe, err)
	} else {
		b.success(probe)
	}
	return n, ttl, err
}

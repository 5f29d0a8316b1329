package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
)

// RateLimitShared returns a Fiber v2 handler that rate-limits each
// tenant. A tenant may spend Limit requests (or units of Cost) per Window,
// or its own PlanFor budget. The count is kept in cfg.Counter, by
// cfg.Algorithm (fixed windows by default), under a key built from the
// tenant ID ("rl:<tenant>" for plain IDs). Over budget, it answers 429.
// When the counter fails, it decides by cfg.Fallback, or lets the request
// through (or answers 503 with FailClosed), and logs. Every response it
// decides carries the rate limit headers (see Decision.SetHeaders).
//
// It panics, naming the field, when cfg is invalid.
func RateLimitShared(cfg Config) fiber.Handler {
	return newFiberDoor(NewLimiter(cfg.options()), cfg).handle
}

// FiberMiddleware returns a Fiber v2 handler that decides each request
// with lim. It is RateLimitShared for a Limiter built with NewLimiter, as
// HTTPMiddleware is for net/http. Build the Limiter first to check its
// counter at start-up (Limiter.Ping), or to decide with it outside Fiber
// too. Of cfg, it reads only how to read a request and answer it: Next,
// Tenant, AnonymousByIP, LimitReached, Cost, MaxDelay, CostAfter,
// SkipFailedRequests and SkipSuccessfulRequests. The budget and the rest
// are lim's: it panics, naming the field, when any other field of cfg is
// set. It gives back and settles as RateLimitShared does.
func FiberMiddleware(lim *Limiter, cfg Config) fiber.Handler {
	if lim == nil {
		panic("ratelimit: FiberMiddleware needs a Limiter, got nil")
	}
	if f := cfg.limiterField(); f != "" {
		panic("ratelimit: FiberMiddleware takes the budget, the counter and the rest from its Limiter, but Config." + f +
			" is set: set only Next, Tenant, AnonymousByIP, LimitReached, Cost, MaxDelay, CostAfter, SkipFailedRequests and " +
			"SkipSuccessfulRequests in its Config, and " + f + " in the Limiter's Options")
	}
	return newFiberDoor(lim, cfg).handle
}

// Config configures RateLimitShared, the Fiber v2 handler. Next, Tenant,
// AnonymousByIP, LimitReached, Cost, CostAfter, SkipFailedRequests and
// SkipSuccessfulRequests say how it reads a request and answers it; every
// other field is the Options field of the same name, with the same
// meaning and default.
type Config struct {
	// Next skips the limiter for a request when it returns true. Skipped
	// requests are neither counted nor given headers.
	//
	// Optional. Default: nil
	Next func(c *fiber.Ctx) bool

	// Tenant returns the ID of the tenant that a request spends from, and
	// false when there is none. Requests without a tenant share one bucket,
	// rl:unknown, unless AnonymousByIP is set. Resolve the tenant from
	// something the gateway has verified (an API key, a token); an ID a
	// client may choose freely lets it pick its own bucket.
	//
	// Optional. Default: c.Locals("tenant"), read as a string, a
	// fmt.Stringer or an integer (of any type, such as type TenantID int64)
	Tenant func(c *fiber.Ctx) (string, bool)

	// AnonymousByIP keys requests without a tenant by client address,
	// c.IP(), instead of sharing rl:unknown between them all, so that one
	// anonymous client cannot lock out the others. c.IP() follows the
	// app's ProxyHeader and trusted-proxy settings (fiber.Config
	// EnableTrustedProxyCheck, TrustedProxies, EnableIPValidation): behind
	// a proxy, trust only the proxy's own header, or every client picks
	// its own address and budget. An address that does not parse counts
	// under rl:unknown. IPv6 clients are keyed by their Options.IPv6Prefix.
	//
	// Optional. Default: false
	AnonymousByIP bool

	// LimitReached answers a request over budget. The rate limit headers
	// and Retry-After are already set when it runs.
	//
	// Optional. Default: returns fiber.NewError(429, "rate limit exceeded"),
	// so the app's ErrorHandler shapes the response
	LimitReached fiber.Handler

	// Cost returns how many units of the budget a request costs (see
	// Limiter.TakeN): an expensive route can cost more than a cheap one.
	// It needs stores that decide costs: setup panics for a CounterStore.
	//
	// Optional. Default: every request costs 1
	Cost func(c *fiber.Ctx) int

	// MaxDelay has a request of a TokenBucket limiter that would fit
	// within it wait for its turn instead of being refused (see
	// Limiter.Wait): its turn is reserved on the store, and the handler
	// runs when it comes. Setup panics for a MaxDelay on another
	// algorithm.
	//
	// Optional. Default: 0, refuse what does not fit now
	MaxDelay time.Duration

	// CostAfter returns what a request cost, once the next handlers have
	// returned and its response is known (the tokens an upstream reports
	// in a header of c.Response(), say): the request is settled at that
	// cost (Limiter.Settle), the difference from its Cost charged, past
	// the limit if need be, or given back. It is called only for a request
	// that was allowed and counted, and not when a skip rule or a later
	// limiter's refusal gives the request back. A cost below 0 is the
	// gateway's mistake: it is logged, and the request keeps its Cost.
	// Setup panics for an InFlight Algorithm, which holds slots, not
	// costs, and when Counter (or Fallback) is a CounterStore.
	//
	// Optional. Default: nil, the cost is Cost's
	CostAfter func(c *fiber.Ctx) int

	// SkipFailedRequests gives back what a request took (Limiter.Release)
	// when its response is a failure, status 400 or more, once the next
	// handlers have returned: only requests that succeed spend the budget.
	// An error a handler returns counts by the status Fiber answers it
	// with by default: a *fiber.Error's Code (found by errors.As), 500 for
	// any other error; an ErrorHandler of the app that answers errors
	// otherwise is not consulted. It needs stores that give back (not a
	// CounterStore), and setup panics for an InFlight Algorithm, whose
	// slots every request gives back anyway.
	//
	// Optional. Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back what a request took when its
	// response is a success, status below 400, as SkipFailedRequests does
	// for failures: only requests that fail spend the budget (a limit on
	// failed logins, say). Its status is read as SkipFailedRequests says,
	// with the same needs.
	//
	// Optional. Default: false
	SkipSuccessfulRequests bool

	// The fields of Options, each with the meaning and default documented
	// on the Options field of the same name.
	Counter               store.Store              // where requests count: a MemoryCounter, a RedisCounter or a store of your own; default: a new MemoryCounter
	Name                  string                   // the limiter's keys and policy name; default: ""
	Limit                 int                      // required: requests per tenant per window, 1 to 2^53
	Window                time.Duration            // required: the window, 1ms to 24h (longer: a Quota with a Calendar)
	Algorithm             Algorithm                // FixedWindow (default), SlidingWindow, InFlight or TokenBucket
	Burst                 int                      // a TokenBucket's most at once, 1 to 2^53; default: Limit
	PlanFor               func(tenant string) Plan // a tenant's own budget; default: nil
	Quotas                []Quota                  // further limits, per Window or per day, week, month or year (Quota.Calendar); default: nil
	Shadow                bool                     // count and decide, but never refuse
	IPv6Prefix            int                      // how anonymous IPv6 clients are keyed, 1 to 128; default: 64
	FailClosed            bool                     // 503 rather than let through when nothing counts
	Logger                *slog.Logger             // failure lines, one per second at most; default: slog.Default()
	DisableLegacyHeaders  bool                     // no X-RateLimit-*
	DisableDraftHeaders   bool                     // no RateLimit-Policy, RateLimit
	StoreTimeout          time.Duration            // the most a request waits for Counter, 1ms to 1m; default: 100ms
	BreakerFailures       int                      // failures in a row that open the breaker, at least 1; default: 5
	BreakerCooldown       time.Duration            // how long the breaker stays open, 1ms to 1h; default: 1s
	Fallback              store.Store              // decides while Counter fails; default: nil
	FallbackLimit         int                      // Fallback's budget per replica, 1 to 2^53; default: Limit
	Metrics               *Metrics                 // counts decisions; default: nil
	DisableOverLimitCache bool                     // ask Counter even for a tenant already over Limit
	Leases                bool                     // decide a hot tenant from blocks of its budget claimed from Counter
}

// options returns the Options fields of cfg.
func (cfg *Config) options() Options {
	return Options{
		Counter:               cfg.Counter,
		Name:                  cfg.Name,
		Limit:                 cfg.Limit,
		Window:                cfg.Window,
		Algorithm:             cfg.Algorithm,
		Burst:                 cfg.Burst,
		PlanFor:               cfg.PlanFor,
		Quotas:                cfg.Quotas,
		Shadow:                cfg.Shadow,
		IPv6Prefix:            cfg.IPv6Prefix,
		FailClosed:            cfg.FailClosed,
		Logger:                cfg.Logger,
		DisableLegacyHeaders:  cfg.DisableLegacyHeaders,
		DisableDraftHeaders:   cfg.DisableDraftHeaders,
		StoreTimeout:          cfg.StoreTimeout,
		BreakerFailures:       cfg.BreakerFailures,
		BreakerCooldown:       cfg.BreakerCooldown,
		Fallback:              cfg.Fallback,
		FallbackLimit:         cfg.FallbackLimit,
		Metrics:               cfg.Metrics,
		DisableOverLimitCache: cfg.DisableOverLimitCache,
		Leases:                cfg.Leases,
	}
}

// limiterField names the first field of cfg that is an Options field and
// is set, or returns "": FiberMiddleware takes those from its Limiter.
func (cfg *Config) limiterField() string {
	for _, f := range [...]struct {
		name string
		set  bool
	}{
		{"Counter", cfg.Counter != nil},
		{"Name", cfg.Name != ""},
		{"Limit", cfg.Limit != 0},
		{"Window", cfg.Window != 0},
		{"Algorithm", cfg.Algorithm != FixedWindow},
		{"Burst", cfg.Burst != 0},
		{"PlanFor", cfg.PlanFor != nil},
		{"Quotas", cfg.Quotas != nil},
		{"Shadow", cfg.Shadow},
		{"IPv6Prefix", cfg.IPv6Prefix != 0},
		{"FailClosed", cfg.FailClosed},
		{"Logger", cfg.Logger != nil},
		{"DisableLegacyHeaders", cfg.DisableLegacyHeaders},
		{"DisableDraftHeaders", cfg.DisableDraftHeaders},
		{"StoreTimeout", cfg.StoreTimeout != 0},
		{"BreakerFailures", cfg.BreakerFailures != 0},
		{"BreakerCooldown", cfg.BreakerCooldown != 0},
		{"Fallback", cfg.Fallback != nil},
		{"FallbackLimit", cfg.FallbackLimit != 0},
		{"Metrics", cfg.Metrics != nil},
		{"DisableOverLimitCache", cfg.DisableOverLimitCache},
		{"Leases", cfg.Leases},
	} {
		if f.set {
			return f.name
		}
	}
	return ""
}

// fiberDoor is the Fiber v2 middleware of a Limiter.
type fiberDoor struct {
	m            *Middleware[*fiber.Ctx]
	next         func(c *fiber.Ctx) bool
	limitReached fiber.Handler
	// userContext: the request's context is the Limiter's (a store that
	// waits, or a wait for a turn). A local store never waits on one, and
	// Fiber's UserContext stores one in the request on first use, which
	// costs more than the count.
	userContext bool
}

func newFiberDoor(lim *Limiter, cfg Config) *fiberDoor {
	if cfg.Tenant == nil {
		cfg.Tenant = func(c *fiber.Ctx) (string, bool) { return lim.TenantOf(c.Locals("tenant")) }
	}
	m, err := NewMiddleware(lim, MiddlewareConfig[*fiber.Ctx]{
		Tenant: cfg.Tenant, AnonymousByIP: cfg.AnonymousByIP, ClientIP: fiberClientIP,
		Cost: cfg.Cost, MaxDelay: cfg.MaxDelay, CostAfter: cfg.CostAfter,
		SkipFailedRequests: cfg.SkipFailedRequests, SkipSuccessfulRequests: cfg.SkipSuccessfulRequests, Status: fiberStatus,
	})
	if err != nil {
		panic(err.Error())
	}
	d := &fiberDoor{m: m, next: cfg.Next, limitReached: cfg.LimitReached, userContext: !lim.wiring.Local || cfg.MaxDelay > 0}
	if d.limitReached == nil {
		d.limitReached = limitExceeded
	}
	return d
}

// fiberClientIP is the address of the client that sent c, as Fiber reads
// it (its ProxyHeader, when set).
func fiberClientIP(c *fiber.Ctx) netip.Addr {
	addr, _ := netip.ParseAddr(c.IP())
	return addr
}

// fiberStatus is the status of c's response once its next handlers
// returned err: the one Fiber's default ErrorHandler answers err with.
func fiberStatus(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	if fe, ok := errors.AsType[*fiber.Error](err); ok {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

var (
	errLimitExceeded = fiber.NewError(fiber.StatusTooManyRequests, "rate limit exceeded")
	// The 503 body names no store, key or error: those are for the log.
	errUnavailable = fiber.NewError(fiber.StatusServiceUnavailable, "service unavailable")
)

func limitExceeded(*fiber.Ctx) error { return errLimitExceeded }

// refusedKey is the c.Locals key under which a handler marks a request it
// refused, for the handlers before it to give back what they took.
type refusedKey struct{}

func (d *fiberDoor) handle(c *fiber.Ctx) error {
	if d.next != nil && d.next(c) {
		return c.Next()
	}
	ctx := context.Background()
	if d.userContext {
		ctx = c.UserContext()
	}
	dec := d.m.Decide(ctx, c)
	dec.SetFastHTTPHeaders(&c.Response().Header)
	if !dec.Allowed {
		return d.refuse(c, &dec)
	}
	if d.m.Holds() {
		return d.holding(ctx, c, &dec)
	}
	err := c.Next()
	if d.m.GivesBack() {
		d.m.Done(ctx, c, &dec, err, c.Locals(refusedKey{}) != nil)
	}
	return err
}

// refuse answers a request that dec refuses, and marks it refused for
// the handlers before it. A function of its own, so that an allowed
// request's code stays short.
func (d *fiberDoor) refuse(c *fiber.Ctx, dec *Decision) error {
	// A true in an interface does not allocate.
	c.Locals(refusedKey{}, true)
	if dec.By == ByNone {
		return errUnavailable
	}
	return d.limitReached(c)
}

// holding passes the request on while dec holds its slots of an InFlight
// limiter, and gives them back when the next handlers return or panic.
// A function of its own, so that a window's request pays no defer.
func (d *fiberDoor) holding(ctx context.Context, c *fiber.Ctx, dec *Decision) error {
	defer d.m.Done(ctx, c, dec, nil, false) // an InFlight limiter's slots come back whatever the outcome
	return c.Next()
}

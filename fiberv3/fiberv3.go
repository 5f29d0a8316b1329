// Package fiberv3 is the Fiber v3 middleware of
// github.com/gatewaykit/ratelimit: a fiber.Handler that rate-limits each
// tenant with a ratelimit.Limiter.
//
// The Limiter holds the budget, the counter and what happens when the
// counter fails (see ratelimit.Options); build it once and hand it to New:
//
//	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 100, Window: time.Minute})
//	app.Use(resolveTenant) // stores the verified tenant ID in c.Locals("tenant")
//	app.Use(fiberv3.New(lim))
//
// For each request the handler reads the tenant (Config.Tenant), counts the
// request with the Limiter, writes the rate limit headers into the response
// (X-RateLimit-Limit, -Remaining, -Reset, RateLimit-Policy, RateLimit, and
// Retry-After on a refusal; see ratelimit.Decision.SetHeaders), and then:
//
//   - within budget (of the counter, or of Options.Fallback while the
//     counter fails), or when nothing could count it and the Limiter fails
//     open, passes the request on with c.Next();
//   - over budget, calls Config.LimitReached, by default a 429;
//   - when nothing could count the request and Options.FailClosed is set,
//     returns a 503 *fiber.Error whose text names no cause (the Limiter has
//     logged it).
//
// Both refusals are *fiber.Error values, so the app's ErrorHandler shapes
// the response.
//
// Several handlers may decide one request, a global one from app.Use and a
// stricter one on a route, each from a Limiter with its own Options.Name:
// each adds its item to RateLimit-Policy and RateLimit, and X-RateLimit-*
// report the most restrictive (of a rate and an InFlight limit, the rate,
// unless the InFlight limit refused the request). A request that a later
// one refuses (429, or the 503 of FailClosed) spends nothing in the
// earlier ones either: the refusing handler marks the request (in
// c.Locals, under a key of its own), and each earlier handler gives back
// what it took (ratelimit.Limiter.Release) once c.Next() returns. That is
// not atomic across limiters: an earlier limiter's count stands from its
// decision until the refusal has come back up the chain and one round
// trip to its counter more, and a request of the same tenant decided
// meanwhile sees it.
//
// # Giving back and settling
//
// Config.SkipFailedRequests and Config.SkipSuccessfulRequests give back
// what a request took, as Fiber's own limiter middleware does, when its
// response fails (status 400 or more) or succeeds. Config.CostAfter
// settles a request at the cost its response shows
// (ratelimit.Limiter.Settle), charging the difference or giving it back.
// With a Limiter whose Options.Algorithm is ratelimit.InFlight, the
// handler takes the tenant's slots before c.Next() and gives them back
// when it returns, panics included. A Release or Settle runs on
// c.Context() without its cancellation: the client may be gone, but the
// count must still be settled.
//
// # Clients without a tenant
//
// Requests without a tenant share one budget, "rl:unknown", unless
// Config.AnonymousByIP keys them by c.IP(). In Fiber v3, c.IP() reads
// fiber.Config.ProxyHeader only when fiber.Config.TrustProxy is set and the
// peer is a trusted proxy (fiber.Config.TrustProxyConfig: Proxies, or
// Loopback, Private, LinkLocal); otherwise it is the peer's address.
// Behind a proxy, set all three, and name a header that holds one address
// and that the proxy itself overwrites, such as X-Real-IP: whatever a
// client can write there picks its budget. X-Forwarded-For is a list that
// each proxy appends to, so its leftmost entries are the client's own
// words, and how c.IP() reads a list depends on the Fiber release and on
// fiber.Config.EnableIPValidation (in v3.1.0: the whole header without it,
// which does not parse, so the request counts under "rl:unknown"; the
// leftmost valid address with it).
package fiberv3

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/gatewaykit/ratelimit"
)

// Config says how the handler that New returns reads a request and answers
// it. The fields mean what the fields of the same names in ratelimit.Config
// mean for the Fiber v2 middleware. The zero Config is valid: every field is
// optional.
type Config struct {
	// Next skips the limiter for a request when it returns true. Skipped
	// requests are neither counted nor given headers.
	//
	// Optional. Default: nil
	Next func(c fiber.Ctx) bool

	// Tenant returns the ID of the tenant that a request spends from, and
	// false when there is none. Requests without a tenant share one
	// budget, rl:unknown, unless AnonymousByIP is set. Resolve the tenant
	// from something the gateway has verified (an API key, a token); an ID
	// a client may choose freely lets it pick its own budget.
	//
	// Optional. Default: c.Locals("tenant"): a string, a fmt.Stringer or
	// an integer (a value of another type is logged, and counts as no
	// tenant)
	Tenant func(c fiber.Ctx) (string, bool)

	// AnonymousByIP keys requests without a tenant by client address,
	// c.IP(), instead of sharing rl:unknown between them all, so that one
	// anonymous client cannot lock out the others. IPv6 clients are keyed
	// by the Limiter's Options.IPv6Prefix; an address that does not parse
	// counts under rl:unknown. c.IP() follows the app's ProxyHeader only
	// for trusted proxies (see the package doc): behind a proxy, trust
	// only the proxy's own header, or every client picks its own address
	// and budget.
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
	// ratelimit.Limiter.TakeN). New panics when the Limiter cannot count
	// costs: when its Counter is a CounterStore.
	//
	// Optional. Default: every request costs 1
	Cost func(c fiber.Ctx) int

	// MaxDelay has a request of a ratelimit.TokenBucket limiter that
	// would fit within it wait for its turn instead of being refused (see
	// ratelimit.Limiter.Wait). New panics for a MaxDelay on another
	// algorithm.
	//
	// Optional. Default: 0, refuse what does not fit now
	MaxDelay time.Duration

	// CostAfter returns what a request cost, once the next handlers have
	// returned and its response is known (the tokens an upstream reports
	// in a header of c.Response(), say): the request is settled at that
	// cost (ratelimit.Limiter.Settle), the difference from its Cost
	// charged, past the limit if need be, or given back. It is called only
	// for a request that was allowed and counted, and not when a skip rule
	// or a later limiter's refusal gives the request back. A cost below 0
	// is the gateway's mistake: it is logged, and the request keeps its
	// Cost. New panics for an InFlight Algorithm, which holds slots, not
	// costs, and when the Limiter's Counter is a CounterStore.
	//
	// Optional. Default: nil, the cost is Cost's
	CostAfter func(c fiber.Ctx) int

	// SkipFailedRequests gives back what a request took
	// (ratelimit.Limiter.Release) when its response is a failure, status
	// 400 or more, once the next handlers have returned: only requests
	// that succeed spend the budget. An error a handler returns counts by
	// the status Fiber answers it with by default: a *fiber.Error's Code
	// (found by errors.As), 500 for any other error; an ErrorHandler of
	// the app that answers errors otherwise is not consulted. New panics
	// when the Limiter cannot give back (its Counter counts by Incr
	// alone), and for an InFlight Algorithm, whose slots every request
	// gives back anyway.
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
}

var (
	errLimitExceeded = fiber.NewError(fiber.StatusTooManyRequests, "rate limit exceeded")
	// The 503 text names no store, key or error: those are for the log.
	errUnavailable = fiber.NewError(fiber.StatusServiceUnavailable, "service unavailable")
)

func limitExceeded(fiber.Ctx) error { return errLimitExceeded }

// refusedKey is the c.Locals key under which a handler marks a request it
// refused, for the handlers before it to give back what they took.
type refusedKey struct{}

// configDefault returns the Config given to New, if any, with the defaults
// filled in, for lim.
func configDefault(lim *ratelimit.Limiter, config ...Config) Config {
	var cfg Config
	switch len(config) {
	case 0:
	case 1:
		cfg = config[0]
	default:
		panic(fmt.Sprintf("fiberv3: New takes at most one Config, got %d", len(config)))
	}
	if cfg.Tenant == nil {
		cfg.Tenant = func(c fiber.Ctx) (string, bool) { return lim.TenantOf(c.Locals("tenant")) }
	}
	if cfg.LimitReached == nil {
		cfg.LimitReached = limitExceeded
	}
	return cfg
}

// New returns a Fiber v3 handler that decides each request with lim, as
// the package doc describes. It panics when lim is nil, when given more
// than one Config, or, naming the field, when the Config asks for what
// lim cannot do.
//
// The context the handler gives lim is c.Context(), which a middleware
// before it may have set with c.SetContext (Fiber's timeout middleware
// does): lim's wait for its counter ends with that context's deadline.
// Not c itself, though a fiber.Ctx is a context.Context too: its Deadline
// and Done are no-ops, and Fiber reuses it once the handler returns.
func New(lim *ratelimit.Limiter, config ...Config) fiber.Handler {
	if lim == nil {
		panic("fiberv3: New needs a *ratelimit.Limiter, got nil")
	}
	cfg := configDefault(lim, config...)
	m, err := ratelimit.NewMiddleware(lim, ratelimit.MiddlewareConfig[fiber.Ctx]{
		Tenant: cfg.Tenant, AnonymousByIP: cfg.AnonymousByIP, ClientIP: clientIP,
		Cost: cfg.Cost, MaxDelay: cfg.MaxDelay, CostAfter: cfg.CostAfter,
		SkipFailedRequests: cfg.SkipFailedRequests, SkipSuccessfulRequests: cfg.SkipSuccessfulRequests, Status: status,
	})
	if err != nil {
		panic("fiberv3: " + err.Error())
	}
	return func(c fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		ctx := c.Context()
		dec := m.Decide(ctx, c)
		dec.SetFastHTTPHeaders(&c.Response().Header)
		if !dec.Allowed {
			// A true in an interface does not allocate.
			c.Locals(refusedKey{}, true)
			if dec.By == ratelimit.ByNone {
				return errUnavailable
			}
			return cfg.LimitReached(c)
		}
		if m.Holds() {
			return holding(ctx, m, c, &dec)
		}
		err := c.Next()
		if m.GivesBack() {
			m.Done(ctx, c, &dec, err, c.Locals(refusedKey{}) != nil)
		}
		return err
	}
}

// holding passes the request on while dec holds its slots of an InFlight
// limiter, and gives them back when the next handlers return or panic.
// A function of its own, so that a window's request pays no defer.
func holding(ctx context.Context, m *ratelimit.Middleware[fiber.Ctx], c fiber.Ctx, dec *ratelimit.Decision) error {
	defer m.Done(ctx, c, dec, nil, false) // an InFlight limiter's slots come back whatever the outcome
	return c.Next()
}

// clientIP is the address of the client that sent c, as Fiber reads it
// (its ProxyHeader, when trusted).
func clientIP(c fiber.Ctx) netip.Addr {
	addr, _ := netip.ParseAddr(c.IP())
	return addr
}

// status is the status of c's response once its next handlers returned
// err: the one Fiber's default ErrorHandler answers err with.
func status(c fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	if fe, ok := errors.AsType[*fiber.Error](err); ok {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

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
// report the most restrictive.
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
	"fmt"
	"net/netip"

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
	// Optional. Default: c.Locals("tenant"), read by
	// ratelimit.Limiter.TenantID: a string, a fmt.Stringer or an integer
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
	// costs (see ratelimit.Limiter.CheckCost).
	//
	// Optional. Default: every request costs 1
	Cost func(c fiber.Ctx) int
}

var (
	errLimitExceeded = fiber.NewError(fiber.StatusTooManyRequests, "rate limit exceeded")
	// The 503 text names no store, key or error: those are for the log.
	errUnavailable = fiber.NewError(fiber.StatusServiceUnavailable, "service unavailable")
)

func limitExceeded(fiber.Ctx) error { return errLimitExceeded }

// configDefault returns the Config given to New, if any, with the defaults
// filled in.
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
		cfg.Tenant = func(c fiber.Ctx) (string, bool) { return lim.TenantID(c.Locals("tenant")) }
	}
	if cfg.LimitReached == nil {
		cfg.LimitReached = limitExceeded
	}
	return cfg
}

// New returns a Fiber v3 handler that decides each request with lim, as
// the package doc describes. It panics when lim is nil or when given more
// than one Config.
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
	if cfg.Cost != nil {
		if err := lim.CheckCost(); err != nil {
			panic("fiberv3: Cost: " + err.Error())
		}
	}
	return func(c fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
		}
		cost := 1
		if cfg.Cost != nil {
			cost = cfg.Cost(c)
		}
		var dec ratelimit.Decision
		if id, ok := cfg.Tenant(c); ok && id != "" {
			dec = lim.TakeN(c.Context(), id, cost)
		} else if cfg.AnonymousByIP {
			addr, _ := netip.ParseAddr(c.IP())
			dec = lim.TakeAddrN(c.Context(), addr, cost)
		} else {
			dec = lim.TakeN(c.Context(), "", cost)
		}
		dec.SetFastHTTPHeaders(&c.Response().Header)
		switch {
		case dec.Allowed:
			return c.Next()
		case dec.By == ratelimit.ByNone:
			return errUnavailable
		}
		return cfg.LimitReached(c)
	}
}

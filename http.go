package ratelimit

import (
	"context"
	"net"
	"net/http"
	"net/netip"
)

// HTTPConfig says how HTTPMiddleware reads a request and answers it.
type HTTPConfig struct {
	// Next skips the limiter for a request when it returns true. Skipped
	// requests are neither counted nor given headers.
	//
	// Optional. Default: nil
	Next func(r *http.Request) bool

	// Tenant returns the ID of the tenant that a request spends from, and
	// false when there is none. Resolve it from something the gateway has
	// verified (an API key, a token), as Config.Tenant says.
	//
	// Optional. Default: TenantFromContext(r.Context())
	Tenant func(r *http.Request) (string, bool)

	// AnonymousByIP keys requests without a tenant by ClientIP instead of
	// sharing rl:unknown between them all (see Limiter.TakeAddr).
	//
	// Optional. Default: false
	AnonymousByIP bool

	// ClientIP returns the address of the client that sent r, for
	// AnonymousByIP. The default, the peer's address, is right when
	// clients connect to this server directly. Behind a proxy, return the
	// address the proxy reports, read from the proxy's own header and only
	// when r comes from the proxy: a client can write any X-Forwarded-For
	// it likes.
	//
	// Optional. Default: the address of r.RemoteAddr
	ClientIP func(r *http.Request) netip.Addr

	// LimitReached answers a request over budget. The rate limit headers
	// and Retry-After are already set when it runs, and the Decision that
	// refused it is in its context (DecisionFromContext). ProblemDetails
	// answers with RFC 9457 problem details.
	//
	// Optional. Default: 429 with the text "rate limit exceeded"
	LimitReached http.Handler

	// Cost returns how many units of the budget a request costs, as
	// Config.Cost does; setup panics when the Limiter cannot count costs
	// (see Limiter.CheckCost).
	//
	// Optional. Default: every request costs 1
	Cost func(r *http.Request) int
}

// HTTPMiddleware returns net/http middleware that decides each request with
// lim before passing it to the next handler. Over budget it answers 429
// (or calls LimitReached); when nothing can count the request under
// Options.FailClosed it answers 503 with a body that names no cause. Every
// response it decides carries the rate limit headers (see
// Decision.SetHeaders).
func HTTPMiddleware(lim *Limiter, cfg HTTPConfig) func(http.Handler) http.Handler {
	if lim == nil {
		panic("ratelimit: HTTPMiddleware needs a Limiter, got nil")
	}
	if cfg.Cost != nil {
		if err := lim.CheckCost(); err != nil {
			panic("ratelimit: Cost: " + err.Error())
		}
	}
	if cfg.Tenant == nil {
		cfg.Tenant = func(r *http.Request) (string, bool) { return TenantFromContext(r.Context()) }
	}
	if cfg.ClientIP == nil {
		cfg.ClientIP = remoteAddr
	}
	if cfg.LimitReached == nil {
		cfg.LimitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		})
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.Next != nil && cfg.Next(r) {
				next.ServeHTTP(w, r)
				return
			}
			cost := 1
			if cfg.Cost != nil {
				cost = cfg.Cost(r)
			}
			var d Decision
			if id, ok := cfg.Tenant(r); ok && id != "" {
				d = lim.TakeN(r.Context(), id, cost)
			} else if cfg.AnonymousByIP {
				d = lim.TakeAddrN(r.Context(), cfg.ClientIP(r), cost)
			} else {
				d = lim.TakeN(r.Context(), "", cost)
			}
			d.SetHeaders(w.Header())
			switch {
			case d.Allowed:
				next.ServeHTTP(w, r)
			case d.By == ByNone:
				http.Error(w, "service unavailable", http.StatusServiceUnavailable)
			default:
				// A copy, so that only a refused request puts its Decision
				// on the heap.
				refused := d
				cfg.LimitReached.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), contextDecision{}, &refused)))
			}
		})
	}
}

// remoteAddr is the address of the peer that sent r.
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err == nil {
		return ap.Addr()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, _ := netip.ParseAddr(host)
	return addr
}

type contextTenant struct{}

// WithTenant returns a copy of ctx that carries the tenant ID id, where
// HTTPMiddleware's default HTTPConfig.Tenant finds it. The gateway's
// authentication middleware calls it once it has verified who sends the
// request.
func WithTenant(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, contextTenant{}, id)
}

// TenantFromContext returns the tenant ID that WithTenant put in ctx, and
// false when there is none or it is empty.
func TenantFromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(contextTenant{}).(string)
	return id, ok && id != ""
}

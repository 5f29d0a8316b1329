package ratelimit

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
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
	// (its Counter or Fallback is a CounterStore).
	//
	// Optional. Default: every request costs 1
	Cost func(r *http.Request) int

	// MaxDelay has a request of a TokenBucket limiter that would fit
	// within it wait for its turn instead of being refused, as
	// Config.MaxDelay says; a request whose context ends while it waits
	// gives its turn back and is refused. Setup panics for a MaxDelay on
	// another algorithm.
	//
	// Optional. Default: 0, refuse what does not fit now
	MaxDelay time.Duration
	// CostAfter returns what a request cost, once the next handler has
	// returned, from the status it answered (as SkipFailedRequests reads
	// it) and the header of its response (the tokens an upstream reports,
	// say): the request is settled at that cost (Limiter.Settle), as
	// Config.CostAfter says, with the same needs.
	//
	// Optional. Default: nil, the cost is Cost's
	CostAfter func(r *http.Request, status int, header http.Header) int

	// SkipFailedRequests gives back what a request took (Limiter.Release)
	// when its response is a failure, status 400 or more, once the next
	// handler has returned: only requests that succeed spend the budget.
	// The status is the one the next handler wrote, 200 when it wrote a
	// body without WriteHeader or wrote nothing, as net/http answers. It
	// needs stores that give back (not a CounterStore), and HTTPMiddleware
	// panics for an InFlight Algorithm, whose slots
	// every request gives back anyway.
	//
	// Optional. Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back what a request took when its
	// response is a success, status below 400, as SkipFailedRequests does
	// for failures: only requests that fail spend the budget (a limit on
	// failed logins, say).
	//
	// Optional. Default: false
	SkipSuccessfulRequests bool
}

// HTTPMiddleware returns net/http middleware that decides each request with
// lim before passing it to the next handler. Over budget it answers 429
// (or calls LimitReached); when nothing can count the request under
// Options.FailClosed it answers 503 with a body that names no cause. Every
// response it decides carries the rate limit headers (see
// Decision.SetHeaders). It panics, naming the field, when cfg asks for
// what lim cannot do.
//
// Several middlewares may decide one request, a global one around a
// stricter one on a route, each with a Limiter of its own Options.Name. A
// request that a later one refuses (429, or the 503 of FailClosed) spends
// nothing in the earlier ones either: each middleware passes the next
// handler its http.ResponseWriter wrapped, the refusing one marks every
// wrapper it finds by unwrapping the writer it got (Unwrap, as
// http.ResponseController does), and each earlier middleware gives back
// what it took (Limiter.Release) once the next handler returns. That is
// not atomic across limiters: an earlier limiter's count stands from its
// decision until the refusal has come back up the chain and one round
// trip to its counter more, and a request of the same tenant decided
// meanwhile sees it. A middleware between two limiters that replaces the
// writer with one that has no Unwrap method (http.TimeoutHandler's, for
// one) hides the refusal from the earlier limiter, whose count then
// stands. The wrapper passes Flush and Hijack through (and, by Unwrap,
// what http.ResponseController reaches), so that streaming handlers and
// WebSocket upgrades keep working; it is reused by later requests, so
// that none allocates one, and, as net/http requires of any writer, must
// not be used once the handler has returned.
//
// With an InFlight Algorithm, the middleware takes the tenant's slots
// before the next handler runs and gives them back when it returns,
// panics included.
func HTTPMiddleware(lim *Limiter, cfg HTTPConfig) func(http.Handler) http.Handler {
	if lim == nil {
		panic("ratelimit: HTTPMiddleware needs a Limiter, got nil")
	}
	tenant, clientIP, costAfter := cfg.Tenant, cfg.ClientIP, cfg.CostAfter
	if tenant == nil {
		tenant = func(r *http.Request) (string, bool) { return TenantFromContext(r.Context()) }
	}
	if clientIP == nil {
		clientIP = remoteAddr
	}
	mc := MiddlewareConfig[exchange]{
		Tenant: func(x exchange) (string, bool) { return tenant(x.r) }, AnonymousByIP: cfg.AnonymousByIP,
		ClientIP: func(x exchange) netip.Addr { return clientIP(x.r) }, MaxDelay: cfg.MaxDelay,
		SkipFailedRequests: cfg.SkipFailedRequests, SkipSuccessfulRequests: cfg.SkipSuccessfulRequests,
		Status: func(x exchange, _ error) int { return answered(x.w.status) },
	}
	if cost := cfg.Cost; cost != nil {
		mc.Cost = func(x exchange) int { return cost(x.r) }
	}
	if costAfter != nil {
		mc.CostAfter = func(x exchange) int { return costAfter(x.r, answered(x.w.status), x.w.Header()) }
	}
	m, err := NewMiddleware(lim, mc)
	if err != nil {
		panic(err.Error())
	}
	limitReached := cfg.LimitReached
	if limitReached == nil {
		limitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		})
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.Next != nil && cfg.Next(r) {
				next.ServeHTTP(w, r)
				return
			}
			d := m.Decide(r.Context(), exchange{r: r})
			d.SetHeaders(w.Header())
			switch {
			case d.Allowed && m.Holds():
				serveHolding(m, next, w, r, &d)
			case d.Allowed && m.GivesBack():
				dw := doorWriters.Get().(*doorWriter)
				dw.ResponseWriter = w
				next.ServeHTTP(dw, r)
				m.Done(r.Context(), exchange{r, dw}, &d, nil, dw.refused)
				*dw = doorWriter{}
				doorWriters.Put(dw)
			case d.Allowed:
				next.ServeHTTP(w, r)
			case d.By == ByNone:
				markRefused(w)
				http.Error(w, "service unavailable", http.StatusServiceUnavailable)
			default:
				markRefused(w)
				// A copy, so that only a refused request puts its Decision
				// on the heap.
				refused := d
				limitReached.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), contextDecision{}, &refused)))
			}
		})
	}
}

// exchange is a net/http request as its Middleware reads it: the request,
// and, once the next handler has run, the writer that recorded its
// status.
type exchange struct {
	r *http.Request
	w *doorWriter
}

// serveHolding serves r while d holds its slots of an InFlight limiter,
// and gives them back when next returns or panics. A function of its own,
// so that a window's request pays no defer.
func serveHolding(m *Middleware[exchange], next http.Handler, w http.ResponseWriter, r *http.Request, d *Decision) {
	defer m.Done(r.Context(), exchange{r: r}, d, nil, false)
	next.ServeHTTP(w, r)
}

// answered is the status of a response whose handler wrote status: 200
// for one that wrote nothing, as net/http answers.
func answered(status int) int {
	if status == 0 {
		return http.StatusOK
	}
	return status
}

// doorWriter is the http.ResponseWriter that HTTPMiddleware hands the next
// handler: it records the status the handler answers, and whether a later
// middleware refused the request. They are pooled, so that a request
// allocates none.
type doorWriter struct {
	http.ResponseWriter
	status  int  // the final status written; 0 until then
	refused bool // a later middleware refused the request
}

var doorWriters = sync.Pool{New: func() any { return new(doorWriter) }}

func (w *doorWriter) WriteHeader(code int) {
	// 1xx answers (103 Early Hints) come before the final one; 101 ends
	// the exchange.
	if w.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *doorWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the writer w wraps, for http.ResponseController and for
// a later HTTPMiddleware that marks a refusal.
func (w *doorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sends what the handler wrote so far, for handlers that stream
// through http.Flusher.
func (w *doorWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController, which returns the
// error of a writer that cannot flush.
func (w *doorWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler (a WebSocket upgrade), when
// the writer w wraps can.
func (w *doorWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

// markRefused marks every doorWriter in w's chain of wrappers: the
// earlier middlewares on the request give back what they took.
func markRefused(w http.ResponseWriter) {
	for w != nil {
		if dw, ok := w.(*doorWriter); ok {
			dw.refused = true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
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

// Command nethttp is a small gateway on net/http that rate-limits each
// tenant with ratelimit.HTTPMiddleware: a budget for every route, and a
// stricter one for /expensive, both counted in one counter. A refusal is
// answered with RFC 9457 problem details (ratelimit.ProblemDetails).
//
//	cd examples/nethttp
//	go run .                                    # in-memory counter
//	REDIS_URL=redis://localhost:6379/0 go run . # shared counter in Redis
//
// It listens on 127.0.0.1:3002; ADDR, LIMIT, WINDOW, ROUTE_LIMIT,
// ROUTE_WINDOW, ALGORITHM and REPLICAS change it (see the start-up
// message). GET /metrics serves both limiters' metrics to Prometheus. The
// same middleware wraps an httputil.ReverseProxy, a chi router or any
// http.Handler.
//
// The example is a Go module of its own, for Prometheus's client (see its
// go.mod). scripts/metrics-picture.sh draws the README's metrics picture
// from three replicas of it.
package main

import (
	"errors"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/examples/internal/demo"
	rlprom "github.com/gatewaykit/ratelimit/prometheus"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("nethttp: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	s, err := demo.FromEnv("127.0.0.1:3002")
	if err != nil {
		return err
	}
	logger := demo.Logger()
	store, err := demo.NewStore(s, logger)
	if err != nil {
		return err
	}
	defer store.Close()

	// The budget of every route, and a stricter one for /expensive on the
	// same counter: its Name gives it keys of its own, so that a request
	// to /expensive spends from both.
	global := ratelimit.Options{
		Name: "global", Counter: store.Counter, Limit: s.Limit, Window: s.Window, Algorithm: s.Algorithm,
		Leases: s.Leases, Logger: logger, Metrics: &ratelimit.Metrics{},
	}
	expensive := global
	expensive.Name, expensive.Limit, expensive.Window, expensive.Metrics = "expensive", s.RouteLimit, s.RouteWindow, &ratelimit.Metrics{}
	if store.Fallback != nil {
		// While Redis fails, each replica counts alone: its share of the
		// budget keeps the whole gateway near the shared one.
		global.Fallback, global.FallbackLimit = store.Fallback, s.FallbackLimit(s.Limit)
		expensive.Fallback, expensive.FallbackLimit = store.Fallback, s.FallbackLimit(s.RouteLimit)
	}
	globalLimiter, expensiveLimiter := ratelimit.NewLimiter(global), ratelimit.NewLimiter(expensive)
	if err := demo.Check(globalLimiter, expensiveLimiter); err != nil {
		return err
	}

	metrics := rlprom.NewCollector()
	metrics.Add("global", global.Metrics)
	metrics.Add("expensive", expensive.Metrics)
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)

	// Requests without a known API key count by client address: the
	// peer's, r.RemoteAddr, right when clients connect directly. Behind a
	// proxy, set HTTPConfig.ClientIP to read the proxy's own header.
	door := ratelimit.HTTPConfig{AnonymousByIP: true, LimitReached: ratelimit.ProblemDetails}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", ratelimit.HTTPMiddleware(globalLimiter, door)(answer("/")))
	mux.Handle("GET /expensive", ratelimit.HTTPMiddleware(globalLimiter, door)(
		ratelimit.HTTPMiddleware(expensiveLimiter, door)(answer("/expensive"))))
	// Health probes and scrapes count nothing: they are outside the
	// limiters.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	demo.Usage("nethttp gateway", "http://"+ln.Addr().String(), s, store, true, nil)

	srv := &http.Server{Handler: resolveTenant(mux), ReadHeaderTimeout: 10 * time.Second}
	return demo.Serve(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, srv.Shutdown)
}

// resolveTenant puts the tenant of the request's API key in its context,
// where HTTPMiddleware's default Tenant looks for it. A missing or unknown
// key puts nothing, and the request counts by address.
func resolveTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := demo.APIKeys[r.Header.Get("X-API-Key")]; ok {
			r = r.WithContext(ratelimit.WithTenant(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

func answer(route string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, _ := ratelimit.TenantFromContext(r.Context())
		// The address counts without its port.
		addr := r.RemoteAddr
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			addr = ap.Addr().String()
		}
		w.Write([]byte(demo.Answer(route, tenant, addr)))
	})
}

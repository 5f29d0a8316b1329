// Command nethttp is a small runnable gateway on net/http that rate-limits
// each tenant with ratelimit.HTTPMiddleware.
//
//	go run ./examples/nethttp                                    # in-memory counter
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/nethttp # shared counter in Redis
//
// ADDR sets the listen address (default :3002). The same middleware wraps
// an httputil.ReverseProxy, a chi router or any http.Handler.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
)

const (
	limit  = 5
	window = 10 * time.Second
)

// apiKeys maps API keys to tenant IDs: a demo table, where a real gateway
// asks its own store.
var apiKeys = map[string]string{"key-acme": "acme", "key-globex": "globex"}

func main() {
	log.SetFlags(0)
	log.SetPrefix("nethttp: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":3002"
	}
	opts := ratelimit.Options{Limit: limit, Window: window}
	backend := "in-memory counter (this process only)"
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		opt.ContextTimeoutEnabled = true // see the README's Redis section
		client := redis.NewClient(opt)
		defer client.Close()
		opts.Counter = ratelimit.NewRedisCounter(client)
		// While Redis is down, each replica limits on its own.
		opts.Fallback = ratelimit.NewMemoryCounter()
		backend = "Redis counter at " + opt.Addr
	}
	lim := ratelimit.NewLimiter(opts)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := ratelimit.TenantFromContext(r.Context())
		if !ok {
			tenant = "none, counted by address " + r.RemoteAddr
		}
		fmt.Fprintf(w, "served tenant %s\n", tenant)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })

	limited := ratelimit.HTTPMiddleware(lim, ratelimit.HTTPConfig{
		Next: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		// Clients connect directly, so RemoteAddr is theirs. Behind a
		// proxy, set ClientIP to read the proxy's own header.
		AnonymousByIP: true,
	})
	srv := &http.Server{Handler: resolveTenant(limited(mux)), ReadHeaderTimeout: 5 * time.Second}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	fmt.Printf(`gateway (net/http) listening on %s, %d requests per %v per tenant, %s
API keys: key-acme, key-globex (demo only). Requests without one are counted per address.
  for i in $(seq 7); do curl -s -o /dev/null -w '%%{http_code}\n' -H 'X-API-Key: key-acme' localhost:%d/; done
  curl -i localhost:%d/
Ctrl-C stops the gateway.
`, ln.Addr(), limit, window, backend, port, port)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop()
	fmt.Println("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// resolveTenant puts the tenant of the request's API key where
// HTTPMiddleware's default Tenant looks for it.
func resolveTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := apiKeys[r.Header.Get("X-API-Key")]; ok {
			r = r.WithContext(ratelimit.WithTenant(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

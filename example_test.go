package ratelimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// The gateway resolves the tenant first (here from a fixed table keyed by an
// API key) and stores it in c.Locals("tenant"), where the limiter reads it.
func ExampleRateLimitShared() {
	tenants := map[string]string{"key-acme": "acme"} // demo only

	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		if id, ok := tenants[c.Get("X-API-Key")]; ok {
			c.Locals("tenant", id)
		}
		return c.Next()
	})
	app.Use(ratelimit.RateLimitShared(ratelimit.Config{
		Limit:  2,
		Window: time.Minute,
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })

	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "key-acme")
		resp, _ := app.Test(req)
		fmt.Println(resp.StatusCode, "remaining:", resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 remaining: 1
	// 200 remaining: 0
	// 429 remaining: 0
}

func ExampleMemoryCounter() {
	counter := ratelimit.NewMemoryCounter()
	defer counter.Close()

	ctx := context.Background()
	for range 3 {
		n, _ := counter.Incr(ctx, "rl:acme", time.Minute)
		fmt.Println(n)
	}
	n, _ := counter.Incr(ctx, "rl:globex", time.Minute)
	fmt.Println(n)
	// Output:
	// 1
	// 2
	// 3
	// 1
}

// Every replica builds its counter over the same Redis; the limiter is
// configured as with the in-memory counter. A *redis.ClusterClient or a
// *redis.Ring works the same way.
//
// No Redis answers here, so the example runs anywhere and shows what a
// replica does while its Redis is down: it lets the request through
// (FailClosed would refuse it), with the limit but no count in the headers,
// and Metrics counts it as failed open.
func ExampleNewRedisCounter() {
	rdb := redis.NewClient(&redis.Options{
		// In production the Redis that every replica shares, e.g.
		// Addr: "redis:6379"; here a socket where none listens.
		Network: "unix",
		Addr:    "/nonexistent/redis.sock",
		// The limiter's time budget then reaches the socket.
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()

	metrics := &ratelimit.Metrics{}
	app := fiber.New()
	app.Use(ratelimit.RateLimitShared(ratelimit.Config{
		Counter: ratelimit.NewRedisCounter(rdb),
		Limit:   100,
		Window:  time.Minute,
		// How long a request waits on Redis; the first requests, before
		// Redis has answered once, wait up to ten times as long.
		StoreTimeout: 20 * time.Millisecond,
		Metrics:      metrics,
		Logger:       slog.New(slog.DiscardHandler), // in production, the failure is logged
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })

	resp, _ := app.Test(httptest.NewRequest("GET", "/", nil), -1)
	fmt.Printf("%d limit %q remaining %q\n", resp.StatusCode,
		resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"))
	s := metrics.Snapshot()
	fmt.Printf("failed open %d, allowed %d; breaker %v\n", s.FailedOpen, s.Allowed, s.Breaker)
	// Output:
	// 200 limit "100" remaining ""
	// failed open 1, allowed 0; breaker closed
}

// failingStore stands for a Redis that is down.
type failingStore struct{}

func (failingStore) Incr(context.Context, string, time.Duration) (int64, error) {
	return 0, fmt.Errorf("dial tcp 10.0.0.7:6379: connection refused")
}

// While the shared counter fails, a local Fallback keeps limiting each
// replica to FallbackLimit, and Metrics counts what decided each request.
func ExampleMetrics() {
	metrics := &ratelimit.Metrics{}
	app := fiber.New()
	app.Use(ratelimit.RateLimitShared(ratelimit.Config{
		Counter:       ratelimit.CounterStore(failingStore{}),
		Limit:         100,
		Window:        time.Minute,
		Fallback:      ratelimit.NewMemoryCounter(),
		FallbackLimit: 2,
		Metrics:       metrics,
		Logger:        slog.New(slog.DiscardHandler),
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })

	for range 3 {
		resp, _ := app.Test(httptest.NewRequest("GET", "/", nil))
		fmt.Println(resp.StatusCode)
	}
	s := metrics.Snapshot()
	fmt.Printf("fallback allowed %d, limited %d; breaker %v\n", s.FallbackAllowed, s.FallbackLimited, s.Breaker)
	// Output:
	// 200
	// 200
	// 429
	// fallback allowed 2, limited 1; breaker closed
}

// The net/http door. The gateway's authentication puts the verified tenant
// in the request's context with WithTenant, where the middleware reads it;
// requests without one are keyed by client address here.
func ExampleHTTPMiddleware() {
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 2, Window: time.Minute})
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") })
	limited := ratelimit.HTTPMiddleware(lim, ratelimit.HTTPConfig{AnonymousByIP: true})(hello)
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-API-Key") == "key-acme" { // demo only
				r = r.WithContext(ratelimit.WithTenant(r.Context(), "acme"))
			}
			next.ServeHTTP(w, r)
		})
	}
	gateway := authenticate(limited)

	for _, key := range []string{"key-acme", "key-acme", "key-acme", ""} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		gateway.ServeHTTP(rec, req)
		fmt.Printf("%d remaining %q retry after %q\n", rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining "1" retry after ""
	// 200 remaining "0" retry after ""
	// 429 remaining "0" retry after "60"
	// 200 remaining "1" retry after ""
}

// A door of any kind, here a job runner, asks the Limiter directly and
// reads the Decision.
func ExampleLimiter_Take() {
	lim := ratelimit.NewLimiter(ratelimit.Options{Name: "exports", Limit: 2, Window: time.Hour})
	for range 3 {
		d := lim.Take(context.Background(), "acme")
		if !d.Allowed {
			fmt.Printf("acme: wait %v (policy %s, %d per window)\n", d.Reset.Round(time.Minute), d.Policy, d.Limit)
			continue
		}
		fmt.Printf("acme: export runs, %d left\n", d.Remaining)
	}
	// Output:
	// acme: export runs, 1 left
	// acme: export runs, 0 left
	// acme: wait 1h0m0s (policy exports, 2 per window)
}

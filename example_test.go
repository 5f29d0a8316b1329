package ratelimit_test

import (
	"context"
	"fmt"
	"log/slog"
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
		Counter:       failingStore{},
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

package ratelimit_test

import (
	"context"
	"fmt"
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
func ExampleNewRedisCounter() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	app := fiber.New()
	app.Use(ratelimit.RateLimitShared(ratelimit.Config{
		Counter: ratelimit.NewRedisCounter(rdb),
		Limit:   100,
		Window:  time.Minute,
	}))
}

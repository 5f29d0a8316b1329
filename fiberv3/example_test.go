package fiberv3_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/fiberv3"
)

// The gateway resolves the tenant first (here from a fixed table keyed by an
// API key) and stores it in c.Locals("tenant"), where the handler reads it.
func ExampleNew() {
	tenants := map[string]string{"key-acme": "acme"} // demo only

	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 2, Window: time.Minute})
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		if id, ok := tenants[c.Get("X-API-Key")]; ok {
			c.Locals("tenant", id)
		}
		return c.Next()
	})
	app.Use(fiberv3.New(lim))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("hello") })

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

package main

import (
	"log"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gofiber/fiber/v2"
)

var tenants = map[string]string{"key-acme": "acme", "key-globex": "globex"}

func main() {
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error { // authentication
		if t, ok := tenants[c.Get("X-API-Key")]; ok {
			c.Locals("tenant", t)
		}
		return c.Next()
	})
	app.Use(ratelimit.RateLimitShared(ratelimit.Config{Limit: 5, Window: time.Minute}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello\n") })
	log.Fatal(app.Listen("127.0.0.1:8080"))
}

// Command gateway is a small gateway on Fiber v2 that rate-limits each
// tenant: a budget for every route, and a stricter one for /expensive,
// both counted in one counter.
//
//	go run ./examples/gateway                                    # in-memory counter
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/gateway # shared counter in Redis
//
// It listens on 127.0.0.1:3000; ADDR, LIMIT, WINDOW, ROUTE_LIMIT,
// ROUTE_WINDOW, ALGORITHM and REPLICAS change it (see the start-up
// message).
//
// It is part of the library's own module and needs nothing that the
// library does not, so that its first run fetches and compiles no more
// than the library. examples/nethttp and examples/fiberv3, modules of
// their own, also serve the limiters' metrics to Prometheus on /metrics.
package main

import (
	"context"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/examples/internal/demo"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("gateway: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	s, err := demo.FromEnv("127.0.0.1:3000")
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
		Logger: logger,
	}
	expensive := global
	expensive.Name, expensive.Limit, expensive.Window = "expensive", s.RouteLimit, s.RouteWindow
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

	// Requests without a known API key count by client address; health
	// probes count nothing.
	door := ratelimit.Config{
		AnonymousByIP: true,
		Next:          func(c *fiber.Ctx) bool { return c.Path() == "/healthz" },
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(resolveTenant)
	app.Use(ratelimit.FiberMiddleware(globalLimiter, door))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString(answer(c, "/")) })
	app.Get("/expensive", ratelimit.FiberMiddleware(expensiveLimiter, door), func(c *fiber.Ctx) error {
		return c.SendString(answer(c, "/expensive"))
	})
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })

	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	demo.Usage("gateway (Fiber v2)", "http://"+ln.Addr().String(), s, store, false)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // a second Ctrl-C kills the process outright
	return app.ShutdownWithTimeout(5 * time.Second)
}

// resolveTenant stores the tenant of the request's API key where the
// limiter's default Tenant looks for it, c.Locals("tenant"). A missing or
// unknown key stores nothing, and the request counts by address.
func resolveTenant(c *fiber.Ctx) error {
	if id, ok := demo.APIKeys[c.Get("X-API-Key")]; ok {
		c.Locals("tenant", id)
	}
	return c.Next()
}

func answer(c *fiber.Ctx, route string) string {
	tenant, _ := c.Locals("tenant").(string)
	return demo.Answer(route, tenant, c.IP())
}

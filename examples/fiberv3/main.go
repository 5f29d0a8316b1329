// Command fiberv3 is a small gateway on Fiber v3 that rate-limits each
// tenant with the fiberv3 door: a budget for every route, and a stricter
// one for /expensive, both counted in one counter.
//
//	cd examples/fiberv3
//	go run .                                    # in-memory counter
//	REDIS_URL=redis://localhost:6379/0 go run . # shared counter in Redis
//
// It listens on 127.0.0.1:3001; ADDR, LIMIT, WINDOW, ROUTE_LIMIT,
// ROUTE_WINDOW, ALGORITHM and REPLICAS change it (see the start-up
// message). GET /metrics serves both limiters' metrics to Prometheus.
//
// The example is a Go module of its own, for Fiber v3 and Prometheus's
// client (see its go.mod).
package main

import (
	"log"
	"net"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/examples/internal/demo"
	"github.com/gatewaykit/ratelimit/fiberv3"
	rlprom "github.com/gatewaykit/ratelimit/prometheus"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("fiberv3: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	s, err := demo.FromEnv("127.0.0.1:3001")
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

	// Requests without a known API key count by client address, c.IP(),
	// which is the peer's: behind a proxy, set fiber.Config's
	// ProxyHeader, TrustProxy and TrustProxyConfig (see the fiberv3
	// package doc). Health probes and scrapes count nothing.
	door := fiberv3.Config{
		AnonymousByIP: true,
		Next:          func(c fiber.Ctx) bool { return c.Path() == "/healthz" || c.Path() == "/metrics" },
	}
	app := fiber.New()
	app.Use(resolveTenant)
	app.Use(fiberv3.New(globalLimiter, door))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString(answer(c, "/")) })
	app.Get("/expensive", fiberv3.New(expensiveLimiter, door), func(c fiber.Ctx) error {
		return c.SendString(answer(c, "/expensive"))
	})
	app.Get("/healthz", func(c fiber.Ctx) error { return c.SendString("ok\n") })
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(registry, promhttp.HandlerOpts{})))

	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	demo.Usage("fiberv3 gateway", "http://"+ln.Addr().String(), s, store, true, nil)

	return demo.Serve(func() error { return app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) },
		app.ShutdownWithContext)
}

// resolveTenant stores the tenant of the request's API key where the
// door's default Tenant looks for it, c.Locals("tenant"). A missing or
// unknown key stores nothing, and the request counts by address.
func resolveTenant(c fiber.Ctx) error {
	if id, ok := demo.APIKeys[c.Get("X-API-Key")]; ok {
		c.Locals("tenant", id)
	}
	return c.Next()
}

func answer(c fiber.Ctx, route string) string {
	tenant, _ := c.Locals("tenant").(string)
	return demo.Answer(route, tenant, c.IP())
}

// Package gateway is the gateway of examples/gateway: its limiters and its
// routes, on Fiber v2. It is a package, not that command's main, so that
// examples/gateway/otel runs the very same gateway with its limiters'
// metrics exported to OpenTelemetry. examples/gateway's doc says what the
// gateway does.
package gateway

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/examples/internal/demo"
)

// Plans are the plans the gateway sells, by name (demo.Plans says who has
// bought which): each a monthly quota on top of the budgets of every
// route, whose Limit and Window a plan leaves as they are. A quota keeps
// its count by its Name, so a tenant moving from free to pro keeps what
// it has spent this month.
var Plans = map[string]ratelimit.Plan{
	"free": {Quotas: []ratelimit.Quota{{Name: "month", Limit: 100, Calendar: ratelimit.CalendarMonth}}},
	"pro":  {Quotas: []ratelimit.Quota{{Name: "month", Limit: 10_000, Calendar: ratelimit.CalendarMonth}}},
}

// Serve serves app on s.Addr until the process is interrupted, after
// printing how to try it; name says what it is, in that message.
func Serve(name string, s demo.Settings, store *demo.Store, app *fiber.App) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	monthly := map[string]int{}
	for name, p := range Plans {
		monthly[name] = p.Quotas[0].Limit
	}
	demo.Usage(name, "http://"+ln.Addr().String(), s, store, false, monthly)
	return demo.Serve(func() error { return app.Listener(ln) }, app.ShutdownWithContext)
}

// New returns the gateway's routes, limited on store's counter as s says,
// once the counter has answered. metrics, when not nil, is called once for
// each of the three limiters, with its name (global, expensive, tokens),
// and returns the Metrics that counts its decisions.
func New(s demo.Settings, store *demo.Store, logger *slog.Logger, metrics func(limiter string) *ratelimit.Metrics) (*fiber.App, error) {
	// The budget of every route, and a stricter one for /expensive on the
	// same counter: its Name gives it keys of its own, so that a request
	// to /expensive spends from both.
	global := ratelimit.Options{
		Name: "global", Counter: store.Counter, Limit: s.Limit, Window: s.Window, Algorithm: s.Algorithm,
		Leases: s.Leases, Logger: logger,
	}
	expensive := global
	expensive.Name, expensive.Limit, expensive.Window = "expensive", s.RouteLimit, s.RouteWindow
	// /v1/complete's budget is in tokens, not requests.
	tokens := global
	tokens.Name, tokens.Limit, tokens.Window = "tokens", tokensPerMinute, time.Minute
	// The monthly quota comes with the tenant's plan, on the limiter that
	// every request meets; a request without a tenant has none.
	global.PlanFor = func(tenant string) ratelimit.Plan { return Plans[demo.Plans[tenant]] }
	if store.Fallback != nil {
		// While Redis fails, each replica counts alone: its share of the
		// budget keeps the whole gateway near the shared one.
		global.Fallback, global.FallbackLimit = store.Fallback, s.FallbackLimit(s.Limit)
		expensive.Fallback, expensive.FallbackLimit = store.Fallback, s.FallbackLimit(s.RouteLimit)
		tokens.Fallback, tokens.FallbackLimit = store.Fallback, s.FallbackLimit(tokensPerMinute)
	}
	if metrics != nil {
		for _, o := range []*ratelimit.Options{&global, &expensive, &tokens} {
			o.Metrics = metrics(o.Name)
		}
	}
	globalLimiter, expensiveLimiter := ratelimit.NewLimiter(global), ratelimit.NewLimiter(expensive)
	tokensLimiter := ratelimit.NewLimiter(tokens)
	if err := demo.Check(globalLimiter, expensiveLimiter, tokensLimiter); err != nil {
		return nil, err
	}

	// Requests without a known API key count by client address. Health
	// probes count nothing, and neither does /usage: a dashboard polling
	// it spends none of the tenant's budget, and a tenant refused for its
	// monthly quota can still read when the month ends. It is a read of
	// one key per limit; a gateway whose tenants might hammer it would
	// give it a budget of its own, as /expensive has.
	door := ratelimit.Config{
		AnonymousByIP: true,
		Next:          func(c *fiber.Ctx) bool { return c.Path() == "/healthz" || c.Path() == "/usage" },
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(resolveTenant)
	app.Use(ratelimit.FiberMiddleware(globalLimiter, door))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString(answer(c, "/")) })
	app.Get("/expensive", ratelimit.FiberMiddleware(expensiveLimiter, door), func(c *fiber.Ctx) error {
		return c.SendString(answer(c, "/expensive"))
	})
	tokensDoor := door
	tokensDoor.CostAfter = tokensUsed
	app.Get("/v1/complete", ratelimit.FiberMiddleware(tokensLimiter, tokensDoor), complete)
	app.Get("/usage", func(c *fiber.Ctx) error {
		tenant, _ := c.Locals("tenant").(string)
		if tenant == "" {
			return c.Status(fiber.StatusUnauthorized).JSON(fiber.Map{"error": "send your API key in X-API-Key"})
		}
		// Unlike a request's decision, Usage waits for Redis as long as
		// its context lets it.
		ctx, cancel := context.WithTimeout(c.UserContext(), time.Second)
		defer cancel()
		var limits []ratelimit.Usage
		for _, l := range []*ratelimit.Limiter{globalLimiter, expensiveLimiter, tokensLimiter} {
			us, err := l.Usage(ctx, tenant)
			if err != nil {
				// The error names the store and the tenant: for the log,
				// not the client.
				logger.Error("gateway: /usage failed", "err", err)
				return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"error": "usage is unavailable, try again"})
			}
			limits = append(limits, us...)
		}
		return c.JSON(limits)
	})
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	return app, nil
}

// tokensPerMinute is each tenant's budget of tokens on /v1/complete.
const tokensPerMinute = 1000

// complete stands for the upstream model behind /v1/complete: it answers,
// and reports in X-Upstream-Tokens the tokens the call used, as an LLM's
// API reports its usage.
func complete(c *fiber.Ctx) error {
	c.Set("X-Upstream-Tokens", "37")
	return c.SendString(answer(c, "/v1/complete"))
}

// tokensUsed is what a call to /v1/complete cost, once its upstream has
// answered: the tokens it reported. A response without the report (the
// upstream failed) keeps the cost the call was admitted with, 1.
func tokensUsed(c *fiber.Ctx) int {
	n, err := strconv.Atoi(string(c.Response().Header.Peek("X-Upstream-Tokens")))
	if err != nil {
		return 1
	}
	return n
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

// Command gateway is a small gateway on Fiber v2 that rate-limits each
// tenant: a budget for every route, and a stricter one for /expensive,
// both counted in one counter. It sells plans, each a monthly quota on
// top of those budgets: tenant globex is on "free", 100 requests a month,
// acme on "pro", 10,000 (the months of the UTC calendar).
//
// GET /v1/complete stands for a route to an LLM: its upstream reports in
// the response header X-Upstream-Tokens how many tokens the call used,
// and each tenant may spend 1,000 tokens a minute. A call is admitted
// while the tenant has a token left, and then charged what the upstream
// reported (Config.CostAfter): a call that goes past the budget leaves a
// debt, and the tenant's next calls are refused until the next minute.
//
// GET /usage answers the calling tenant's use of each of its limits, as a
// JSON array of objects, one a limit ("global", "month", "expensive",
// "tokens"), as ratelimit.Usage encodes them:
//
//	name       the limit's name, as the RateLimit header fields give it
//	limit      requests (or tokens) allowed per window
//	used       requests (or tokens) counted in the window now
//	remaining  requests (or tokens) left in it
//	window     its window, or the length of the month now running
//	reset      until more than remaining is available (0: no window runs)
//
// Both durations are in whole seconds, rounded up as the headers round
// them. A request without a known API key gets 401.
//
//	go run ./examples/gateway                                    # in-memory counter
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/gateway # shared counter in Redis
//
// It listens on 127.0.0.1:3000; ADDR, LIMIT, WINDOW, ROUTE_LIMIT,
// ROUTE_WINDOW, ALGORITHM, LEASES and REPLICAS change it (see the start-up
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
	"log/slog"
	"net"
	"strconv"
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
	app, err := newApp(s, store, logger)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	monthly := map[string]int{}
	for name, p := range plans {
		monthly[name] = p.Quotas[0].Limit
	}
	demo.Usage("gateway (Fiber v2)", "http://"+ln.Addr().String(), s, store, false, monthly)

	return demo.Serve(func() error { return app.Listener(ln) }, app.ShutdownWithContext)
}

// plans are the plans the gateway sells, by name (demo.Plans says who has
// bought which): each a monthly quota on top of the budgets of every
// route, whose Limit and Window a plan leaves as they are. A quota keeps
// its count by its Name, so a tenant moving from free to pro keeps what
// it has spent this month.
var plans = map[string]ratelimit.Plan{
	"free": {Quotas: []ratelimit.Quota{{Name: "month", Limit: 100, Calendar: ratelimit.CalendarMonth}}},
	"pro":  {Quotas: []ratelimit.Quota{{Name: "month", Limit: 10_000, Calendar: ratelimit.CalendarMonth}}},
}

// newApp returns the gateway's routes, limited on store's counter as s
// says, once the counter has answered.
func newApp(s demo.Settings, store *demo.Store, logger *slog.Logger) (*fiber.App, error) {
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
	global.PlanFor = func(tenant string) ratelimit.Plan { return plans[demo.Plans[tenant]] }
	if store.Fallback != nil {
		// While Redis fails, each replica counts alone: its share of the
		// budget keeps the whole gateway near the shared one.
		global.Fallback, global.FallbackLimit = store.Fallback, s.FallbackLimit(s.Limit)
		expensive.Fallback, expensive.FallbackLimit = store.Fallback, s.FallbackLimit(s.RouteLimit)
		tokens.Fallback, tokens.FallbackLimit = store.Fallback, s.FallbackLimit(tokensPerMinute)
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

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
// Its limiters and routes are in examples/internal/demo/gateway, so that
// examples/gateway/otel, a module of its own, runs the same gateway and
// prints its limiters' metrics as OpenTelemetry data to standard output
// (every 10 s; OTEL_METRIC_EXPORT_INTERVAL, in milliseconds, changes it):
//
//	cd examples/gateway/otel && go run .
//
// It is part of the library's own module and needs nothing that the
// library does not, so that its first run fetches and compiles no more
// than the library. examples/nethttp and examples/fiberv3, modules of
// their own, also serve the limiters' metrics to Prometheus on /metrics.
package main

import (
	"log"
	"log/slog"

	"github.com/gofiber/fiber/v2"

	"github.com/gatewaykit/ratelimit/examples/internal/demo"
	"github.com/gatewaykit/ratelimit/examples/internal/demo/gateway"
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
	return gateway.Serve("gateway (Fiber v2)", s, store, app)
}

// newApp returns the gateway's routes, limited on store's counter as s
// says, once the counter has answered; its limiters count no metrics.
func newApp(s demo.Settings, store *demo.Store, logger *slog.Logger) (*fiber.App, error) {
	return gateway.New(s, store, logger, nil)
}

// Command fiberv3 is a small runnable gateway on Fiber v3 that rate-limits
// each tenant with the fiberv3 door of ratelimit.
//
//	go run ./examples/fiberv3                                    # in-memory counter
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/fiberv3 # shared counter in Redis
//
// ADDR sets the listen address (default :3001).
//
// The example is a Go module of its own, as the fiberv3 door is; the
// repository's go.work lets the command above run from the repository's
// root.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/fiberv3"
)

// Small enough to hit by hand with curl: a global budget for every route,
// and a stricter one for /expensive, spent from the same counter.
const (
	limit  = 5
	window = 10 * time.Second

	expensiveLimit  = 2
	expensiveWindow = time.Minute
)

// apiKeys maps API keys to tenant IDs. It is for this demo only: a real
// gateway resolves keys from its own store and never ships them in code.
var apiKeys = map[string]string{
	"key-acme":   "acme",
	"key-globex": "globex",
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("gateway: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":3001"
	}

	counter, store, backend, err := newCounter(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	defer store.Close()

	opts := ratelimit.Options{
		Name:    "global",
		Counter: counter,
		Limit:   limit,
		Window:  window,
	}
	if _, shared := counter.(*ratelimit.RedisCounter); shared {
		// While Redis is down, limit each replica on its own rather than
		// not at all.
		opts.Fallback = ratelimit.NewMemoryCounter()
	}
	global := ratelimit.NewLimiter(opts)
	// A second limiter on the same counter: its name gives it keys of its
	// own, so a request to /expensive spends one from each budget.
	expensive := ratelimit.NewLimiter(ratelimit.Options{
		Name:     "expensive",
		Counter:  counter,
		Limit:    expensiveLimit,
		Window:   expensiveWindow,
		Fallback: opts.Fallback,
	})

	// Clients connect directly, so c.IP() is the peer's address. Behind a
	// proxy, set ProxyHeader, TrustProxy and TrustProxyConfig (see the
	// fiberv3 package doc), or every client picks its own budget.
	app := fiber.New()
	app.Use(resolveTenant)
	app.Use(fiberv3.New(global, fiberv3.Config{
		// Health probes must not spend a budget or be refused.
		Next: func(c fiber.Ctx) bool { return c.Path() == "/healthz" },
		// Requests without a known key get a budget per client address
		// rather than one shared by all of them.
		AnonymousByIP: true,
	}))
	app.Get("/", func(c fiber.Ctx) error {
		tenant, _ := c.Locals("tenant").(string)
		if tenant == "" {
			tenant = "none (no or unrecognised X-API-Key), counted by address " + c.IP()
		}
		return c.SendString("served tenant " + tenant + "\n")
	})
	app.Get("/expensive", fiberv3.New(expensive, fiberv3.Config{AnonymousByIP: true}), func(c fiber.Ctx) error {
		return c.SendString("served an expensive request\n")
	})
	app.Get("/healthz", func(c fiber.Ctx) error { return c.SendString("ok\n") })

	// Listening before printing the instructions makes a busy port fail
	// here, and lets ADDR=:0 print the port that was picked.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	printUsage(ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port, backend)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // a second Ctrl-C kills the process outright
	fmt.Println("shutting down")
	return app.ShutdownWithTimeout(5 * time.Second)
}

// resolveTenant stores the tenant of the request's API key where the
// limiter's default Tenant func looks for it. A missing or unknown key
// stores nothing. The stored ID is the table's own string, not c.Get's,
// whose bytes Fiber reuses once the request is done.
func resolveTenant(c fiber.Ctx) error {
	if id, ok := apiKeys[c.Get("X-API-Key")]; ok {
		c.Locals("tenant", id)
	}
	return c.Next()
}

// newCounter returns the counter to limit with and what to close at exit:
// a MemoryCounter, or a RedisCounter when redisURL is set.
func newCounter(redisURL string) (ratelimit.Counter, io.Closer, string, error) {
	if redisURL == "" {
		c := ratelimit.NewMemoryCounter()
		return c, c, "in-memory counter (this process only)", nil
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, "", fmt.Errorf("REDIS_URL: %w", err)
	}
	// A round trip to a Redis that stops answering then ends at its
	// requests' deadline, and a lone request's round trip runs on its own
	// goroutine.
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	// Fail now rather than let every request fail open later.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = errors.New("no answer to PING within 2s")
		}
		return nil, nil, "", fmt.Errorf("cannot reach Redis at %s: %w", opt.Addr, err)
	}
	return ratelimit.NewRedisCounter(client), client, "Redis counter at " + opt.Addr, nil
}

func printUsage(listening string, port int, backend string) {
	url := fmt.Sprintf("localhost:%d", port)
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(apiKeys)) {
		keys = append(keys, k+" -> "+apiKeys[k])
	}
	fmt.Printf(`gateway (Fiber v3) listening on %s, %d requests per %v per tenant, %s

Demo API keys (an in-code table, demo only: a real gateway resolves keys
from its own store): %s.
Requests without a known key are counted per client address.

Try it: the first %d answers are 200, then 429 until the window ends.
  for i in $(seq 7); do curl -s -o /dev/null -w '%%{http_code}\n' -H 'X-API-Key: key-acme' %s/; done
See the rate limit headers:
  curl -i -H 'X-API-Key: key-acme' %s/
/expensive also has a budget of its own, %d per %v; the headers list both:
  curl -i -H 'X-API-Key: key-globex' %s/expensive
A request without a key, and the health check (not limited):
  curl -i %s/
  curl %s/healthz

Ctrl-C stops the gateway.
`, listening, limit, window, backend, strings.Join(keys, ", "), limit, url, url,
		expensiveLimit, expensiveWindow, url, url, url)
}

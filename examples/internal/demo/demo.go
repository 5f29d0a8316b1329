// Package demo is what the three example gateways (examples/gateway on
// Fiber v2, examples/fiberv3, examples/nethttp) share and that has nothing
// to do with rate limiting in itself: reading their settings from the
// environment, making the counter, checking it at start-up, and the demo's
// API keys and plans. Each example's main.go sets up its limiters and its
// routes, which is the part worth reading; examples/gateway's are in the
// package gateway below this one, which its OpenTelemetry variant,
// examples/gateway/otel, runs too.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
)

// Settings are an example's knobs, from the environment.
type Settings struct {
	Addr        string              // ADDR: where to listen
	RedisURL    string              // REDIS_URL: a shared counter in Redis; empty for one in memory
	Limit       int                 // LIMIT: requests per Window per tenant, on every route
	Window      time.Duration       // WINDOW
	RouteLimit  int                 // ROUTE_LIMIT: the stricter budget of /expensive
	RouteWindow time.Duration       // ROUTE_WINDOW
	Replicas    int                 // REPLICAS: how many replicas share the Redis counter
	Algorithm   ratelimit.Algorithm // ALGORITHM: fixed or sliding
	Leases      bool                // LEASES=1: hot tenants decided from blocks of their budgets (Options.Leases)
}

// FromEnv reads Settings from the environment; addr is ADDR's default.
func FromEnv(addr string) (Settings, error) {
	s := Settings{Addr: addr, Limit: 5, Window: 10 * time.Second, RouteLimit: 2, RouteWindow: time.Minute, Replicas: 1}
	var errs []error
	str := func(name string, dst *string) {
		if v := os.Getenv(name); v != "" {
			*dst = v
		}
	}
	num := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("%s=%q: want a positive whole number", name, v))
			}
			*dst = n
		}
	}
	dur := func(name string, dst *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want a duration such as 10s or 1m", name, v))
			}
			*dst = d
		}
	}
	str("ADDR", &s.Addr)
	str("REDIS_URL", &s.RedisURL)
	num("LIMIT", &s.Limit)
	dur("WINDOW", &s.Window)
	num("ROUTE_LIMIT", &s.RouteLimit)
	dur("ROUTE_WINDOW", &s.RouteWindow)
	num("REPLICAS", &s.Replicas)
	switch v := os.Getenv("ALGORITHM"); v {
	case "", "fixed":
	case "sliding":
		s.Algorithm = ratelimit.SlidingWindow
	default:
		errs = append(errs, fmt.Errorf("ALGORITHM=%q: want fixed or sliding", v))
	}
	switch v := os.Getenv("LEASES"); v {
	case "", "0":
	case "1":
		s.Leases = true
	default:
		errs = append(errs, fmt.Errorf("LEASES=%q: want 1 or 0", v))
	}
	return s, errors.Join(errs...)
}

// Logger is the examples' logger: text on the standard error.
func Logger() *slog.Logger { return slog.New(slog.NewTextHandler(os.Stderr, nil)) }

// Store is the counter an example limits with.
type Store struct {
	Counter store.Store
	// Fallback decides while Redis fails, each replica on its own, so that
	// an outage means approximate limiting rather than none; nil in
	// memory.
	Fallback store.Store
	About    string // what it is, for the start-up message
	io.Closer
}

// NewStore returns a MemoryCounter, or a RedisCounter when s.RedisURL is
// set, with go-redis's own log lines sent through logger.
func NewStore(s Settings, logger *slog.Logger) (*Store, error) {
	if s.RedisURL == "" {
		c := ratelimit.NewMemoryCounter()
		return &Store{Counter: c, About: "an in-memory counter (this process only)", Closer: c}, nil
	}
	opt, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	// A round trip to a Redis that stops answering then ends at its
	// requests' deadline (see the README's Redis section).
	opt.ContextTimeoutEnabled = true
	redis.SetLogger(ratelimit.RedisLogger(logger))
	client := redis.NewClient(opt)
	return &Store{Counter: ratelimit.NewRedisCounter(client), Fallback: ratelimit.NewMemoryCounter(),
		About: "a Redis counter at " + opt.Addr, Closer: client}, nil
}

// FallbackLimit is a replica's share of limit while Redis fails: with
// REPLICAS replicas each counting alone, the whole gateway then admits
// about limit, not REPLICAS × limit.
func (s Settings) FallbackLimit(limit int) int { return max(1, limit/s.Replicas) }

// Check pings each limiter's counter, so that a store that is down or
// misconfigured (a wrong password, a missing permission) stops the
// example at start-up, in the server's own words, rather than letting
// every request fail open.
func Check(limiters ...*ratelimit.Limiter) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, l := range limiters {
		if err := l.Ping(ctx); err != nil {
			return err
		}
	}
	return nil
}

// APIKeys maps API keys to tenant IDs. It is for this demo only: a real
// gateway resolves keys from its own store and never ships them in code.
var APIKeys = map[string]string{
	"key-acme":   "acme",
	"key-globex": "globex",
}

// Plans maps tenant IDs to the plan each has bought, for an example that
// sells plans; a tenant without one has none. For this demo only, as
// APIKeys is.
var Plans = map[string]string{
	"acme":   "pro",
	"globex": "free",
}

// Answer is the text a route answers: who was served, and what the budget
// was counted under.
func Answer(route, tenant, clientAddr string) string {
	if tenant != "" {
		return fmt.Sprintf("%s: served tenant %s, counted under its tenant ID\n", route, tenant)
	}
	return fmt.Sprintf("%s: served a request without a known API key, counted under its client address %s\n", route, clientAddr)
}

// Usage prints how to try an example listening at url; metrics says
// whether it serves the limiters' metrics to Prometheus on /metrics, and
// monthly is the monthly quota of each plan it sells, by plan name (nil
// when it sells none), which it then also reports on /usage.
func Usage(name, url string, s Settings, store *Store, metrics bool, monthly map[string]int) {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(APIKeys)) {
		keys = append(keys, k+" -> "+APIKeys[k])
	}
	unlimited := fmt.Sprintf("Health check (not limited):\n  curl %s/healthz\n", url)
	if metrics {
		unlimited = fmt.Sprintf("Health check and the limiters' metrics (neither limited):\n  curl %s/healthz\n  curl %s/metrics\n", url, url)
	}
	fmt.Printf(`%s listening on %s with %s:
  every route: %d requests per %v per tenant (%v); /expensive: %d per %v more
Demo API keys (demo only): %s; other requests count by client address.

Try it: the first %d answers are 200, then 429 until the window ends.
  for i in $(seq 7); do curl -s -o /dev/null -w '%%{http_code}\n' -H 'X-API-Key: key-acme' %s/; done
The rate limit headers, and both budgets on /expensive:
  curl -i -H 'X-API-Key: key-globex' %s/expensive
%s`, name, url, store.About, s.Limit, s.Window, s.Algorithm, s.RouteLimit, s.RouteWindow,
		strings.Join(keys, ", "), s.Limit, url, url, unlimited)
	if monthly != nil {
		free := monthly[Plans["globex"]]
		var plans []string
		for _, p := range slices.Sorted(maps.Keys(monthly)) {
			var tenants []string
			for _, t := range slices.Sorted(maps.Keys(Plans)) {
				if Plans[t] == p {
					tenants = append(tenants, t)
				}
			}
			plans = append(plans, fmt.Sprintf("%s %d a month (%s)", p, monthly[p], strings.Join(tenants, ", ")))
		}
		fmt.Printf(`Plans, each a monthly quota (UTC) on top of the budgets above: %s.
A tenant's use of each of its limits, as JSON (not limited, and spends nothing):
  curl -H 'X-API-Key: key-globex' %s/usage
globex's monthly quota refuses its request %d (start with LIMIT=%d, or the budget per window refuses first):
  for i in $(seq %d); do curl -s -o /dev/null -w '%%{http_code} ' -H 'X-API-Key: key-globex' %s/; done
`, strings.Join(plans, ", "), url, free+1, 10*free, free+1, url)
	}
	fmt.Print(`Settings: ADDR, LIMIT, WINDOW, ROUTE_LIMIT, ROUTE_WINDOW, ALGORITHM (fixed|sliding),
REDIS_URL (redis://host:6379/0), REPLICAS (replicas sharing REDIS_URL),
LEASES=1 (hot tenants decided from leased blocks). Ctrl-C stops it.
`)
}

// Serve runs serve until it returns, or until the process is interrupted
// (Ctrl-C, SIGTERM), and then calls shutdown with 5 seconds for the
// requests in flight. A second Ctrl-C kills the process outright.
func Serve(serve func() error, shutdown func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- serve() }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return shutdown(ctx)
}

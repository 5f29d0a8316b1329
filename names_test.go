package ratelimit

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// Limiters that agree on the budget may share keys, and differently named
// ones share a counter freely; TestConfigPanics has the cases that panic.
func TestLimitersSharingACounter(t *testing.T) {
	for _, c := range []store.Store{claimedCounter(""), claimedRedisCounter()} {
		RateLimitShared(Config{Counter: c, Limit: 10, Window: time.Second}) // the same budget: shared on purpose
		RateLimitShared(Config{Counter: c, Name: "route", Limit: 2, Window: time.Minute})
		RateLimitShared(Config{Counter: c, Name: "other", Limit: 3, Window: time.Hour})
	}
}

// twoLimiterApp is a gateway with a global limiter on every route and a
// stricter one on /expensive, both on counter.
func twoLimiterApp(counter store.Store, global, route Config) *fiber.App {
	global.Counter, route.Counter = counter, counter
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		c.Locals("tenant", strings.Clone(c.Get("X-Tenant")))
		return c.Next()
	})
	app.Use(RateLimitShared(global))
	ok := func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) }
	app.Get("/expensive", RateLimitShared(route), ok)
	app.Get("/", ok)
	return app
}

type wantHeaders struct {
	status                                     int
	policy, rateLimit, limit, remaining, reset string
	retryAfter                                 string
}

func checkHeaders(t *testing.T, what string, resp *http.Response, want wantHeaders) {
	t.Helper()
	if resp.StatusCode != want.status {
		t.Errorf("%s: status %d, want %d", what, resp.StatusCode, want.status)
	}
	for _, f := range []struct{ field, want string }{
		{"RateLimit-Policy", want.policy},
		{"RateLimit", want.rateLimit},
		{"X-RateLimit-Limit", want.limit},
		{"X-RateLimit-Remaining", want.remaining},
		{"X-RateLimit-Reset", want.reset},
		{"Retry-After", want.retryAfter},
	} {
		if got := strings.Join(resp.Header.Values(f.field), " | "); got != f.want {
			t.Errorf("%s: %s = %q, want %q", what, f.field, got, f.want)
		}
	}
}

// testTwoLimiters spends a global budget of 10 per 10 s and a route's of
// 2 per minute on one counter: each route request counts once in each.
func testTwoLimiters(t *testing.T, counter store.Store, tenant string, count func(key string) int64) {
	app := twoLimiterApp(counter,
		Config{Name: "global", Limit: 10, Window: 10 * time.Second},
		Config{Name: "expensive", Limit: 2, Window: time.Minute})
	const policy = `"global";q=10;w=10, "expensive";q=2;w=60`
	checkHeaders(t, "route request 1", getPath(t, app, "/expensive", tenant), wantHeaders{
		200, policy, `"global";r=9;t=10, "expensive";r=1;t=60`, "2", "1", "60", ""})
	checkHeaders(t, "route request 2", getPath(t, app, "/expensive", tenant), wantHeaders{
		200, policy, `"global";r=8;t=10, "expensive";r=0;t=60`, "2", "0", "60", ""})
	checkHeaders(t, "route request 3", getPath(t, app, "/expensive", tenant), wantHeaders{
		429, policy, `"global";r=7;t=10, "expensive";r=0;t=60`, "2", "0", "60", "60"})
	// The global limiter wrote its headers before the route refused, and
	// gave its count back after: the refused request spent nothing, so
	// the plain requests have 8 left.
	for i := 4; i <= 11; i++ {
		checkHeaders(t, "plain request", getPath(t, app, "/", tenant), wantHeaders{
			200, `"global";q=10;w=10`, `"global";r=` + string(rune('0'+11-i)) + `;t=10`, "10", string(rune('0' + 11 - i)), "10", ""})
	}
	checkHeaders(t, "plain request 12", getPath(t, app, "/", tenant), wantHeaders{
		429, `"global";q=10;w=10`, `"global";r=0;t=10`, "10", "0", "10", "10"})
	if g, e := count("rl:global#"+tenant), count("rl:expensive#"+tenant); g != 10 || e != 2 {
		t.Errorf("counts: global %d, expensive %d; want 10 and 2: one count per limiter per request it allowed, none for a refusal", g, e)
	}
	if n := count("rl:" + tenant); n != 0 {
		t.Errorf("the unnamed key rl:%s counted %d, want 0", tenant, n)
	}

	// The route refuses while the global budget, exhausted too, ends
	// later: Retry-After and X-RateLimit-* report the later end.
	app = twoLimiterApp(counter,
		Config{Name: "global-2", Limit: 2, Window: time.Minute},
		Config{Name: "route-2", Limit: 1, Window: 10 * time.Second})
	const policy2 = `"global-2";q=2;w=60, "route-2";q=1;w=10`
	checkHeaders(t, "second app, request 1", getPath(t, app, "/expensive", tenant), wantHeaders{
		200, policy2, `"global-2";r=1;t=60, "route-2";r=0;t=10`, "1", "0", "10", ""})
	checkHeaders(t, "second app, request 2", getPath(t, app, "/expensive", tenant), wantHeaders{
		429, policy2, `"global-2";r=0;t=60, "route-2";r=0;t=10`, "2", "0", "60", "60"})
}

func TestTwoLimitersOnOneMemoryCounter(t *testing.T) {
	counter := NewMemoryCounter()
	testTwoLimiters(t, counter, "acme", func(key string) int64 {
		// One more increment reads the count; the key is not used after.
		n, err := counter.Incr(context.Background(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return n - 1
	})
}

func TestTwoLimitersOnOneRedisCounter(t *testing.T) {
	rdb := newRedisClient(t)
	testTwoLimiters(t, NewRedisCounter(rdb), uniqueTenant(t), func(key string) int64 {
		n, err := rdb.Get(context.Background(), key).Int64()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return n
	})
	requireEveryKeyExpires(t, rdb)
}

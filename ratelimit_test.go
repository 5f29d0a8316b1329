package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// The Fiber handler's basics: it allows up to the limit, keys each tenant,
// and takes Next, LimitReached and the app's ErrorHandler. Its counters of
// a test's own, fakeCounter and ttlFake, serve tests across the package.

// fakeCounter is the seed's scripted counter: it counts like a store and
// records what the middleware asked for.
type fakeCounter struct {
	mu         sync.Mutex
	count      int64
	keys       []string
	lastWindow time.Duration
	err        error
	// result, when set, replaces the count (for counters that misbehave).
	result *int64
}

func (f *fakeCounter) Incr(_ context.Context, key string, window time.Duration) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, key)
	f.lastWindow = window
	if f.err != nil {
		return 0, f.err
	}
	if f.result != nil {
		return *f.result, nil
	}
	f.count++
	return f.count, nil
}

func (f *fakeCounter) lastKey() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) == 0 {
		return ""
	}
	return f.keys[len(f.keys)-1]
}

func (f *fakeCounter) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}

// ttlFake is a Store of a test's own that counts with a fakeCounter, as
// Incr does (a refused request counts too), and reports a fixed time left.
type ttlFake struct {
	*fakeCounter
	ttl time.Duration
}

var _ store.Store = ttlFake{}

func (f ttlFake) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.All}, nil
}

func (f ttlFake) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	n, err := f.Incr(ctx, string(r.Key), r.Window)
	res.Allowed = n <= r.Limit
	res.Counts[0] = store.Count{N: n, Fits: res.Allowed, Left: f.ttl, Length: r.Window}
	return err
}

func (f ttlFake) Give(context.Context, *store.Request, store.Marks) error { return nil }
func (f ttlFake) Reset(context.Context, *store.Request) error             { return nil }

func TestAllowsUpToTheLimitThenBlocks(t *testing.T) {
	fc := &fakeCounter{}
	reached := 0
	app := newApp(RateLimitShared(Config{Counter: CounterStore(fc), Limit: 3, Window: time.Minute}), &reached)

	for i := 1; i <= 3; i++ {
		if got := get(t, app, "acme").StatusCode; got != http.StatusOK {
			t.Fatalf("request %d = %d, want 200", i, got)
		}
	}
	resp := get(t, app, "acme")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 4 = %d, want 429", resp.StatusCode)
	}
	if got := httpresp.Body(t, resp); got != "rate limit exceeded" {
		t.Errorf("429 body = %q, want %q", got, "rate limit exceeded")
	}
	if reached != 3 {
		t.Errorf("handler ran %d times, want 3", reached)
	}
	if fc.lastWindow != time.Minute {
		t.Errorf("window passed to the counter = %v, want 1m", fc.lastWindow)
	}
}

func TestKeys(t *testing.T) {
	tests := []struct {
		name   string
		locals any // stored as c.Locals("tenant") when not nil
		tenant func(c *fiber.Ctx) (string, bool)
		want   string
	}{
		{name: "tenant from locals", locals: "acme", want: "rl:acme"},
		{name: "no tenant", want: "rl:unknown"},
		{name: "empty tenant in locals", locals: "", want: "rl:unknown"},
		{name: "locals holds an integer", locals: 42, want: "rl:42"},
		{name: "locals holds a type the limiter cannot read", locals: 3.5, want: "rl:unknown"},
		{
			name:   "custom tenant func",
			tenant: func(c *fiber.Ctx) (string, bool) { return "globex", true },
			want:   "rl:globex",
		},
		{
			name:   "custom tenant func without a tenant",
			tenant: func(c *fiber.Ctx) (string, bool) { return "ignored", false },
			want:   "rl:unknown",
		},
		{
			name:   "empty tenant ID",
			tenant: func(c *fiber.Ctx) (string, bool) { return "", true },
			want:   "rl:unknown",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeCounter{}
			app := fiber.New()
			app.Use(func(c *fiber.Ctx) error {
				if tt.locals != nil {
					c.Locals("tenant", tt.locals)
				}
				return c.Next()
			})
			app.Use(RateLimitShared(Config{Counter: CounterStore(fc), Limit: 10, Window: time.Minute, Tenant: tt.tenant}))
			app.Get("/", func(c *fiber.Ctx) error { return nil })
			get(t, app, "")
			if got := fc.lastKey(); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

// A tenant ID read with c.Get points into fasthttp's request buffer, which
// the next request on the connection overwrites. The key the counter keeps
// must not change with it.
func TestKeyDoesNotAliasRequestBuffers(t *testing.T) {
	fc := &fakeCounter{}
	app := fiber.New()
	app.Use(RateLimitShared(Config{
		Counter: CounterStore(fc), Limit: 10, Window: time.Minute,
		Tenant: func(c *fiber.Ctx) (string, bool) { return c.Get("X-Tenant"), true },
	}))
	app.Get("/", func(c *fiber.Ctx) error { return nil })
	h := app.Handler()

	var ctx fasthttp.RequestCtx
	for _, tenant := range []string{"aaaa", "bbbb"} {
		ctx.Request.Reset()
		ctx.Request.SetRequestURI("/")
		ctx.Request.Header.Set("X-Tenant", tenant)
		h(&ctx)
	}
	if fc.keys[0] != "rl:aaaa" || fc.keys[1] != "rl:bbbb" {
		t.Fatalf("keys = %q, want [rl:aaaa rl:bbbb]", fc.keys)
	}
}

func TestNextSkips(t *testing.T) {
	fc := &fakeCounter{}
	reached := 0
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(fc), Limit: 1, Window: time.Minute,
		Next: func(c *fiber.Ctx) bool { return c.Path() == "/healthz" },
	}), &reached)

	for range 3 {
		resp := getPath(t, app, "/healthz", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("skipped request = %d, want 200", resp.StatusCode)
		}
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "" {
			t.Errorf("skipped request has X-RateLimit-Limit %q", got)
		}
	}
	if fc.calls() != 0 {
		t.Errorf("counter called %d times for skipped requests", fc.calls())
	}
	if got := get(t, app, "acme").StatusCode; got != http.StatusOK {
		t.Errorf("first counted request = %d, want 200", got)
	}
	if got := get(t, app, "acme").StatusCode; got != http.StatusTooManyRequests {
		t.Errorf("second counted request = %d, want 429", got)
	}
}

func TestLimitReached(t *testing.T) {
	app := newApp(RateLimitShared(Config{
		Counter: ttlFake{&fakeCounter{}, 5 * time.Second}, Limit: 1, Window: time.Minute,
		LimitReached: func(c *fiber.Ctx) error {
			return c.Status(fiber.StatusTooManyRequests).JSON(fiber.Map{"error": "slow down"})
		},
	}), nil)
	get(t, app, "acme")
	resp := get(t, app, "acme")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429", resp.StatusCode)
	}
	if got := httpresp.Body(t, resp); got != `{"error":"slow down"}` {
		t.Errorf("body = %q, want the LimitReached body", got)
	}
	if got := resp.Header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After = %q, want 5 (set before LimitReached runs)", got)
	}
}

func TestErrorHandlerShapesTheRefusal(t *testing.T) {
	var seen error
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		seen = err
		return c.Status(fiber.StatusTooManyRequests).SendString("custom")
	}})
	app.Use(RateLimitShared(Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Minute}))
	app.Get("/", func(c *fiber.Ctx) error { return nil })
	get(t, app, "")
	resp := get(t, app, "")
	var fe *fiber.Error
	if !errors.As(seen, &fe) || fe.Code != fiber.StatusTooManyRequests {
		t.Fatalf("ErrorHandler got %v, want a *fiber.Error with code 429", seen)
	}
	if got := httpresp.Body(t, resp); got != "custom" {
		t.Errorf("body = %q, want the ErrorHandler's", got)
	}
}

func TestDefaultCounterIsInMemory(t *testing.T) {
	app := newApp(RateLimitShared(Config{Limit: 2, Window: time.Minute}), nil)
	for i, want := range []int{200, 200, 429} {
		if got := get(t, app, "acme").StatusCode; got != want {
			t.Fatalf("request %d = %d, want %d", i+1, got, want)
		}
	}
	if got := get(t, app, "globex").StatusCode; got != http.StatusOK {
		t.Errorf("another tenant = %d, want 200: tenants have their own budgets", got)
	}
}

type tenantNumber int64

type tenantName struct{ name string }

func (t tenantName) String() string { return t.name }

// The default tenant reader takes a string, a fmt.Stringer and the integer
// types, a gateway's own or not; any other type is no tenant, and logged
// with its type rather than silently shared under rl:unknown.
func TestTenantID(t *testing.T) {
	rec := newLogRecorder()
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute, Logger: rec.logger()})
	for _, tt := range []struct {
		v    any
		want string
	}{
		{"acme", "acme"}, {"", ""}, {nil, ""}, {tenantName{"globex"}, "globex"},
		{42, "42"}, {int8(-3), "-3"}, {uint64(1 << 63), "9223372036854775808"}, {tenantNumber(7), "7"},
		{[]byte("bytes"), ""}, {3.5, ""}, {[]byte("again"), ""}, {2.5, ""},
	} {
		if got, ok := lim.wiring.TenantID(tt.v); got != tt.want || ok != (tt.want != "") {
			t.Errorf("TenantID(%#v) = %q, %v; want %q", tt.v, got, ok, tt.want)
		}
	}
	// Within one second: a line for each type, at error level, with the
	// fix; the same type's second is held back.
	lines := rec.withMsg("ratelimit: the request's tenant is of a type")
	if len(lines) != 2 || lines[0].str("type") != "[]uint8" || lines[1].str("type") != "float64" {
		t.Fatalf("log %v; want two lines, one naming []uint8 and one float64", rec.lines())
	}
	for _, l := range lines {
		if l.level != slog.LevelError || !strings.Contains(l.str("fix"), "fmt.Stringer") || !strings.Contains(l.str("fix"), "Tenant") {
			t.Errorf("line %v; want error level, and a fix naming the types it reads and Tenant", l)
		}
	}

	// Through the door: four tenants of an integer type keep four budgets.
	app := fiber.New()
	var n int64
	app.Use(func(c *fiber.Ctx) error { n++; c.Locals("tenant", tenantNumber(n)); return c.Next() })
	app.Use(RateLimitShared(Config{Limit: 1, Window: time.Minute}))
	app.Get("/", func(c *fiber.Ctx) error { return nil })
	for i := range 4 {
		if resp := getPath(t, app, "/", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("tenant %d: status %d, want 200: each tenant has a budget of its own", i+1, resp.StatusCode)
		}
	}
}

// FiberMiddleware decides with the Limiter it is given, and refuses a
// Config that sets a budget of its own.
func TestFiberMiddleware(t *testing.T) {
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
	app := newApp(FiberMiddleware(lim, Config{Tenant: func(*fiber.Ctx) (string, bool) { return "acme", true }}), nil)
	if resp := get(t, app, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d, want 200", resp.StatusCode)
	}
	if resp := get(t, app, ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second: %d, want 429", resp.StatusCode)
	}
	if d := lim.Take(context.Background(), "acme"); d.Allowed {
		t.Fatal("the Limiter did not count the handler's requests")
	}
	for name, f := range map[string]func(){
		"nil limiter":   func() { FiberMiddleware(nil, Config{}) },
		"a budget":      func() { FiberMiddleware(lim, Config{Limit: 5}) },
		"a counter too": func() { FiberMiddleware(lim, Config{Counter: NewMemoryCounter()}) },
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.HasPrefix(msg, "ratelimit: FiberMiddleware") {
					t.Errorf("%s: panic %q, want one naming FiberMiddleware", name, msg)
				}
			}()
			f()
		}()
	}
}

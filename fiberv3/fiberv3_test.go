package fiberv3_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/fiberv3"
	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
	"github.com/gatewaykit/ratelimit/store"
)

// TestBehaviourTable (door_test.go) runs the behaviour that every door
// shares: budgets, headers, keys, anonymous clients by address, failure,
// Next and LimitReached. The tests here cover what is Fiber v3's own: which
// address c.IP() yields under the app's proxy settings, the tenant in
// c.Locals, the context handed to the Limiter, and the *fiber.Error values
// the refusals are.

// request is what send sends: GET path from peer (default defaultPeer),
// with the tenant in X-Tenant when set, and header's fields.
type request struct {
	path   string
	peer   string
	tenant string
	header map[string]string
}

const defaultPeer = "192.0.2.1"

// send hands req to app as fasthttp's server would, without a network, and
// returns the response as net/http has it.
func send(app *fiber.App, req request) *http.Response {
	var ctx fasthttp.RequestCtx
	if req.path == "" {
		req.path = "/"
	}
	if req.peer == "" {
		req.peer = defaultPeer
	}
	ctx.Request.SetRequestURI(req.path)
	ctx.Request.Header.SetMethod(fiber.MethodGet)
	ctx.SetRemoteAddr(&net.TCPAddr{IP: net.ParseIP(req.peer), Port: 40000})
	if req.tenant != "" {
		ctx.Request.Header.Set("X-Tenant", req.tenant)
	}
	for k, v := range req.header {
		ctx.Request.Header.Set(k, v)
	}
	app.Handler()(&ctx)
	return httpresp.FromFastHTTP(&ctx)
}

// newApp returns an app with config that sets the tenant from the X-Tenant
// header (a test shortcut; real gateways resolve it), runs h and answers
// 200, counting the requests that reached it in reached when that is not
// nil.
func newApp(config fiber.Config, h fiber.Handler, reached *int) *fiber.App {
	app := fiber.New(config)
	app.Use(func(c fiber.Ctx) error {
		if id := c.Get("X-Tenant"); id != "" {
			c.Locals("tenant", strings.Clone(id))
		}
		return c.Next()
	})
	app.Use(h)
	app.Get("/*", func(c fiber.Ctx) error {
		if reached != nil {
			*reached++
		}
		return c.SendString("ok")
	})
	return app
}

// recordingCounter is a ratelimit.Counter that counts in memory and
// records the key of each call.
type recordingCounter struct {
	mu     sync.Mutex
	keys   []string
	counts map[string]int64
}

func (r *recordingCounter) Incr(_ context.Context, key string, _ time.Duration) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	if r.counts == nil {
		r.counts = map[string]int64{}
	}
	r.counts[key]++
	return r.counts[key], nil
}

// lastKey returns the key of the latest call, "" when there was none.
func (r *recordingCounter) lastKey() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return ""
	}
	return r.keys[len(r.keys)-1]
}

// newLimiter is a limiter of limit a minute that counts with counter's
// Incr (nil: in a MemoryCounter).
func newLimiter(counter ratelimit.Counter, limit int) *ratelimit.Limiter {
	var s store.Store
	if counter != nil {
		s = ratelimit.CounterStore(counter)
	}
	return ratelimit.NewLimiter(ratelimit.Options{
		Counter: s, Limit: limit, Window: time.Minute,
		Logger: slog.New(slog.DiscardHandler),
	})
}

func TestTenant(t *testing.T) {
	fromHeader := func(c fiber.Ctx) (string, bool) {
		id := c.Get("X-Org")
		return strings.Clone(id), id != ""
	}
	tests := []struct {
		name    string
		locals  any // c.Locals("tenant"), when not nil
		tenant  func(c fiber.Ctx) (string, bool)
		header  map[string]string
		wantKey string
	}{
		{name: "default with empty Locals", locals: "", wantKey: "rl:unknown"},
		{name: "default with integer Locals", locals: 42, wantKey: "rl:42"},
		{name: "default with Locals of a type it cannot read", locals: 3.5, wantKey: "rl:unknown"},
		{name: "custom", tenant: fromHeader, locals: "acme",
			header: map[string]string{"X-Org": "globex"}, wantKey: "rl:globex"},
		{name: "custom without tenant", tenant: fromHeader, locals: "acme", wantKey: "rl:unknown"},
		{name: "custom returning an empty ID", locals: "acme",
			tenant:  func(fiber.Ctx) (string, bool) { return "", true },
			wantKey: "rl:unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordingCounter{}
			app := fiber.New()
			app.Use(func(c fiber.Ctx) error {
				if tt.locals != nil {
					c.Locals("tenant", tt.locals)
				}
				return c.Next()
			})
			app.Use(fiberv3.New(newLimiter(rc, 10), fiberv3.Config{Tenant: tt.tenant}))
			app.Get("/", func(c fiber.Ctx) error { return nil })

			if got := send(app, request{header: tt.header}).StatusCode; got != http.StatusOK {
				t.Fatalf("status = %d, want 200", got)
			}
			if got := rc.lastKey(); got != tt.wantKey {
				t.Errorf("key = %q, want %q", got, tt.wantKey)
			}
		})
	}
}

func TestAnonymousByIP(t *testing.T) {
	// The app trusts one proxy and reads the client's address from the
	// header it sets.
	const proxy = "10.0.0.1"
	behindProxy := fiber.Config{
		ProxyHeader:      "X-Real-IP",
		TrustProxy:       true,
		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{proxy}},
	}
	validated := behindProxy
	validated.ProxyHeader = fiber.HeaderXForwardedFor
	validated.EnableIPValidation = true

	tests := []struct {
		name    string
		app     fiber.Config
		req     request
		wantKey string
	}{
		{name: "IPv4 peer", req: request{peer: "203.0.113.7"},
			wantKey: "rl:#ip:203.0.113.7"},
		{name: "IPv6 peer by its /64", req: request{peer: "2001:db8:1:2:aaaa::1"},
			wantKey: "rl:#ip:2001:db8:1:2::/64"},
		{name: "IPv4 from the trusted proxy's header", app: behindProxy,
			req:     request{peer: proxy, header: map[string]string{"X-Real-IP": "203.0.113.7"}},
			wantKey: "rl:#ip:203.0.113.7"},
		{name: "header of an untrusted peer ignored", app: behindProxy,
			req:     request{peer: "198.51.100.9", header: map[string]string{"X-Real-IP": "203.0.113.7"}},
			wantKey: "rl:#ip:198.51.100.9"},
		{name: "header ignored without TrustProxy", app: fiber.Config{ProxyHeader: "X-Real-IP"},
			req:     request{peer: proxy, header: map[string]string{"X-Real-IP": "203.0.113.7"}},
			wantKey: "rl:#ip:10.0.0.1"},
		{name: "address that does not parse", app: behindProxy,
			req:     request{peer: proxy, header: map[string]string{"X-Real-IP": "not-an-address"}},
			wantKey: "rl:unknown"},
		// The client and the one trusted proxy in X-Forwarded-For. (How
		// c.IP() reads longer lists, and lists without
		// EnableIPValidation, changes between Fiber releases.)
		{name: "list with EnableIPValidation", app: validated,
			req: request{peer: proxy,
				header: map[string]string{fiber.HeaderXForwardedFor: "203.0.113.7, 10.0.0.1"}},
			wantKey: "rl:#ip:203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordingCounter{}
			app := newApp(tt.app, fiberv3.New(newLimiter(rc, 10), fiberv3.Config{AnonymousByIP: true}), nil)
			if got := send(app, tt.req).StatusCode; got != http.StatusOK {
				t.Fatalf("status = %d, want 200", got)
			}
			if got := rc.lastKey(); got != tt.wantKey {
				t.Errorf("key = %q, want %q", got, tt.wantKey)
			}
		})
	}
}

// Both refusals are *fiber.Error values, which the app's ErrorHandler turns
// into the response.
func TestRefusalsGoThroughErrorHandler(t *testing.T) {
	closed := ratelimit.NewMemoryCounter()
	closed.Close()
	tests := []struct {
		name     string
		opts     ratelimit.Options
		wantCode int
		wantText string
	}{
		{name: "over budget", opts: ratelimit.Options{Counter: ratelimit.NewMemoryCounter()},
			wantCode: fiber.StatusTooManyRequests, wantText: "rate limit exceeded"},
		{name: "fail closed", opts: ratelimit.Options{Counter: closed, FailClosed: true},
			wantCode: fiber.StatusServiceUnavailable, wantText: "service unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.Limit, opts.Window = 1, time.Minute
			opts.Logger = slog.New(slog.DiscardHandler)
			var seen []error
			reached := 0
			app := newApp(fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error {
				seen = append(seen, err)
				return fiber.DefaultErrorHandler(c, err)
			}}, fiberv3.New(ratelimit.NewLimiter(opts)), &reached)

			var resp *http.Response
			for range 2 {
				resp = send(app, request{tenant: "acme"})
			}
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantCode)
			}
			var fe *fiber.Error
			if len(seen) == 0 || !errors.As(seen[len(seen)-1], &fe) || fe.Code != tt.wantCode {
				t.Fatalf("ErrorHandler got %v, want a *fiber.Error with code %d", seen, tt.wantCode)
			}
			if b := httpresp.Body(t, resp); b != tt.wantText {
				t.Errorf("body = %q, want %q", b, tt.wantText)
			}
			if opts.FailClosed && reached != 0 {
				t.Errorf("handler ran %d times behind a failed count with FailClosed", reached)
			}
		})
	}
}

type traceKey struct{}

// contextCounter records ctx.Value(traceKey{}) of each call.
type contextCounter struct {
	mu     sync.Mutex
	values []any
}

func (cc *contextCounter) Incr(ctx context.Context, _ string, _ time.Duration) (int64, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.values = append(cc.values, ctx.Value(traceKey{}))
	return 1, nil
}

// The Limiter gets c.Context(), on each of the handler's three paths: what
// a middleware before the door set with c.SetContext (a deadline, a trace)
// reaches the counter.
func TestContextIsTheRequestContext(t *testing.T) {
	tests := []struct {
		name          string
		tenant        string
		anonymousByIP bool
	}{
		{name: "tenant", tenant: "acme"},
		{name: "no tenant"},
		{name: "no tenant, by address", anonymousByIP: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := &contextCounter{}
			door := fiberv3.New(newLimiter(cc, 10), fiberv3.Config{AnonymousByIP: tt.anonymousByIP})
			app := newApp(fiber.Config{}, func(c fiber.Ctx) error {
				c.SetContext(context.WithValue(c.Context(), traceKey{}, "trace-1"))
				return door(c)
			}, nil)

			send(app, request{tenant: tt.tenant})
			cc.mu.Lock()
			defer cc.mu.Unlock()
			if !slices.Equal(cc.values, []any{"trace-1"}) {
				t.Errorf("counter saw context values %v, want [trace-1]", cc.values)
			}
		})
	}
}

func TestNewPanics(t *testing.T) {
	lim := newLimiter(nil, 1)
	tests := []struct {
		name string
		new  func()
		want string
	}{
		{"nil limiter", func() { fiberv3.New(nil) },
			"fiberv3: New needs a *ratelimit.Limiter, got nil"},
		{"two configs", func() { fiberv3.New(lim, fiberv3.Config{}, fiberv3.Config{}) },
			"fiberv3: New takes at most one Config, got 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if got := recover(); got != tt.want {
					t.Errorf("panic = %v, want %q", got, tt.want)
				}
			}()
			tt.new()
		})
	}
}

// A request that gives nothing back, or gives back to a MemoryCounter,
// allocates nothing more than without the handler: with skip rules, on an
// InFlight limiter, and behind another limiter.
func TestGivesBackWithoutAllocating(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	options := func(name string, algo ratelimit.Algorithm) ratelimit.Options {
		return ratelimit.Options{Name: name, Limit: 1 << 40, Window: time.Hour, Algorithm: algo,
			DisableLegacyHeaders: true, DisableDraftHeaders: true}
	}
	// allocs is the mean allocations of a request through doors. Under
	// -race, sync.Pool drops a quarter of what it is given, at random, so
	// that Fiber's pools allocate now and then: a mean over many requests
	// sees through that, and one allocation a request stands out.
	allocs := func(doors ...fiber.Handler) float64 {
		app := fiber.New()
		app.Use(func(c fiber.Ctx) error {
			c.Locals("tenant", "acme")
			return c.Next()
		})
		for _, d := range doors {
			app.Use(d)
		}
		app.Get("/", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		h := app.Handler()
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/")
		const calls = 2000
		return testing.AllocsPerRun(1, func() {
			for range calls {
				ctx.Response.Reset()
				h(&ctx)
				if ctx.Response.StatusCode() != fiber.StatusOK {
					t.Fatalf("status %d, want 200", ctx.Response.StatusCode())
				}
			}
		}) / calls
	}
	bare := allocs()
	for _, c := range []struct {
		name  string
		algo  ratelimit.Algorithm
		cfg   fiberv3.Config
		route bool
	}{
		{name: "plain"},
		{name: "SkipFailedRequests, succeeding", cfg: fiberv3.Config{SkipFailedRequests: true}},
		{name: "SkipSuccessfulRequests, given back", cfg: fiberv3.Config{SkipSuccessfulRequests: true}},
		{name: "InFlight", algo: ratelimit.InFlight},
		{name: "two limiters", route: true},
	} {
		doors := []fiber.Handler{fiberv3.New(ratelimit.NewLimiter(options("", c.algo)), c.cfg)}
		if c.route {
			doors = append(doors, fiberv3.New(ratelimit.NewLimiter(options("route", c.algo))))
		}
		if n := allocs(doors...); n-bare >= 0.75*float64(len(doors)) {
			t.Errorf("%s: %.2f allocations a request, want %.2f as without the limiter", c.name, n, bare)
		}
	}
}

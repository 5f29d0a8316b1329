package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

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

// syncBuffer is a log sink that tests read while handlers may write. Only
// TestLogLinesCannotBeForged reads text, as what it checks is the text that
// slog's handlers write; the other tests read a logRecorder.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

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

func TestStoreErrorFailsOpen(t *testing.T) {
	fc := &fakeCounter{err: errors.New("dial tcp 10.0.0.7:6379: connection refused")}
	logs := newLogRecorder()
	reached := 0
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(fc), Limit: 1, Window: time.Minute,
		Logger: logs.logger(),
	}), &reached)

	for i := 1; i <= 3; i++ {
		resp := get(t, app, "acme")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with a failing store = %d, want 200", i, resp.StatusCode)
		}
		// The limit is known; what is left of it is not.
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "1" {
			t.Errorf("X-RateLimit-Limit = %q, want 1", got)
		}
		for _, h := range []string{"X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "Retry-After"} {
			if got := resp.Header.Get(h); got != "" {
				t.Errorf("%s = %q on a failed count, want none", h, got)
			}
		}
	}
	if reached != 3 {
		t.Errorf("handler ran %d times, want 3", reached)
	}
	lines := logs.lines()
	if len(lines) != 1 {
		t.Fatalf("log lines = %v, want 1 (at most one a second)", lines)
	}
	l := lines[0]
	if l.level != slog.LevelError || l.msg != "ratelimit: counter failed, request decided by fail open" ||
		l.str("tenant") != "acme" || l.str("key") != "rl:acme" || !errors.Is(l.err(), fc.err) {
		t.Errorf("log line %v; want an error saying the request failed open, with tenant acme, key rl:acme and the store's error", l)
	}
	if n, ok := l.int("suppressed"); !ok || n != 0 {
		t.Errorf("log line %v; want suppressed=0", l)
	}
}

func TestFailureLogIsThrottledUnderConcurrency(t *testing.T) {
	clock := newFakeClock()
	logs := newLogRecorder()
	fc := &fakeCounter{err: errors.New("i/o timeout")}
	h := newApp(fiberHandler(Config{
		Counter: CounterStore(fc), Limit: 1, Window: time.Minute,
		Logger: logs.logger(),
		// Every failure reaches the log's throttle: no breaker opens.
		BreakerFailures: 1 << 30,
	}, clock.Now), nil).Handler()

	burst := func(n int) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				if got := send(h, "/", "").StatusCode; got != http.StatusOK {
					t.Errorf("status = %d, want 200 (fail open)", got)
				}
			})
		}
		close(start)
		wg.Wait()
	}

	burst(1000)
	if got := len(logs.lines()); got != 1 {
		t.Fatalf("1000 concurrent failures in one second wrote %d log lines, want 1", got)
	}
	clock.Advance(999 * time.Millisecond)
	burst(10)
	if got := len(logs.lines()); got != 1 {
		t.Fatalf("failures 999ms later wrote %d lines in all, want still 1", got)
	}
	clock.Advance(time.Millisecond)
	burst(1)
	if got := len(logs.lines()); got != 2 {
		t.Fatalf("a failure a second later left %d lines, want 2", got)
	}
	clock.Advance(500 * time.Millisecond)
	burst(5)
	clock.Advance(500 * time.Millisecond)
	burst(1)
	lines := logs.lines()
	if len(lines) != 3 {
		t.Fatalf("a failure another second later left %d lines, want 3", len(lines))
	}

	// Every failure is accounted for: it wrote a line, or the next line
	// counts it as suppressed. Which of the first two lines counts a
	// failure of the first burst that ran alongside the first line is not
	// fixed; the ten of the second burst came after the first line was
	// written, so the second line counts them. The third line counts the
	// five since the second, and no more.
	suppressed := make([]int64, len(lines))
	for i, line := range lines {
		n, ok := line.int("suppressed")
		if !ok {
			t.Fatalf("line %d has no suppressed count: %v", i+1, line)
		}
		suppressed[i] = n
	}
	if got := suppressed[0] + suppressed[1]; got != 1009 {
		t.Errorf("the first two lines report %v suppressed, %d in all; want the 1009 failures that wrote no line", suppressed[:2], got)
	}
	if suppressed[1] < 10 {
		t.Errorf("second line reports %d suppressed, want at least the 10 failures after the first line", suppressed[1])
	}
	if suppressed[2] != 5 {
		t.Errorf("third line reports %d suppressed, want the 5 failures since the second line", suppressed[2])
	}
}

func TestFailClosed(t *testing.T) {
	secret := "dial tcp 10.0.0.7:6379: connection refused"
	fc := &fakeCounter{err: errors.New(secret)}
	logs := newLogRecorder()
	reached := 0
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(fc), Limit: 5, Window: time.Minute, FailClosed: true,
		Logger: logs.logger(),
	}), &reached)

	resp := get(t, app, "acme")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", resp.StatusCode)
	}
	b := httpresp.Body(t, resp)
	for _, leak := range []string{"10.0.0.7", "6379", "refused", "rl:", "acme", "dial"} {
		if strings.Contains(b, leak) {
			t.Errorf("503 body %q leaks %q", b, leak)
		}
	}
	if reached != 0 {
		t.Errorf("handler ran %d times behind a failed count with FailClosed", reached)
	}
	if lines := logs.lines(); len(lines) != 1 || lines[0].msg != "ratelimit: counter failed, request decided by fail closed" ||
		!errors.Is(lines[0].err(), fc.err) {
		t.Errorf("log = %v, want one line saying fail closed, with the store's error", lines)
	}
}

func TestCounterReturningNoCountIsAFailure(t *testing.T) {
	for _, n := range []int64{0, -3} {
		fc := &fakeCounter{result: &n}
		logs := newLogRecorder()
		app := newApp(RateLimitShared(Config{
			Counter: CounterStore(fc), Limit: 5, Window: time.Minute, FailClosed: true,
			Logger: logs.logger(),
		}), nil)
		if got := get(t, app, "acme").StatusCode; got != http.StatusServiceUnavailable {
			t.Errorf("count %d: status = %d, want 503 (a store failure)", n, got)
		}
		want := fmt.Sprintf("counter returned %d", n)
		if lines := logs.withMsg("ratelimit: counter failed"); len(lines) != 1 || lines[0].err() == nil ||
			!strings.Contains(lines[0].err().Error(), want) {
			t.Errorf("count %d: log %v; want one failure saying %q", n, logs.lines(), want)
		}
	}
}

func TestHeaders(t *testing.T) {
	const ttl = 42*time.Second + 300*time.Millisecond
	all := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}
	tests := []struct {
		name    string
		cfg     Config
		counter store.Store
		calls   int // requests made; the headers of the last are checked
		status  int
		want    map[string]string // headers of all not listed must be absent
	}{
		{
			name: "first request", calls: 1, status: 200,
			counter: ttlFake{&fakeCounter{}, ttl},
			want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "43",
				"RateLimit-Policy": `"default";q=3;w=90`, "RateLimit": `"default";r=2;t=43`,
			},
		},
		{
			name: "last allowed", calls: 3, status: 200,
			counter: ttlFake{&fakeCounter{}, ttl},
			want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "43",
				"RateLimit-Policy": `"default";q=3;w=90`, "RateLimit": `"default";r=0;t=43`,
			},
		},
		{
			name: "over budget: remaining is never negative", calls: 5, status: 429,
			counter: ttlFake{&fakeCounter{}, ttl},
			want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "43",
				"RateLimit-Policy": `"default";q=3;w=90`, "RateLimit": `"default";r=0;t=43`,
				"Retry-After": "43",
			},
		},
		{
			name: "counter without time left reports the whole window", calls: 4, status: 429,
			counter: CounterStore(&fakeCounter{}),
			want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "90",
				"RateLimit-Policy": `"default";q=3;w=90`, "RateLimit": `"default";r=0;t=90`,
				"Retry-After": "90",
			},
		},
		{
			name: "legacy headers off", calls: 4, status: 429,
			cfg:     Config{DisableLegacyHeaders: true},
			counter: ttlFake{&fakeCounter{}, ttl},
			want: map[string]string{
				"RateLimit-Policy": `"default";q=3;w=90`, "RateLimit": `"default";r=0;t=43`, "Retry-After": "43",
			},
		},
		{
			name: "draft headers off", calls: 1, status: 200,
			cfg:     Config{DisableDraftHeaders: true},
			counter: ttlFake{&fakeCounter{}, ttl},
			want:    map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "43"},
		},
		{
			name: "both off", calls: 1, status: 200,
			cfg:     Config{DisableLegacyHeaders: true, DisableDraftHeaders: true},
			counter: ttlFake{&fakeCounter{}, ttl},
			want:    map[string]string{},
		},
		{
			name: "sub-second time left rounds up", calls: 1, status: 200,
			counter: ttlFake{&fakeCounter{}, 10 * time.Millisecond},
			want: map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "1",
				"RateLimit-Policy": `"default";q=3;w=90`, "RateLimit": `"default";r=2;t=1`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Counter, cfg.Limit, cfg.Window = tt.counter, 3, 90*time.Second
			app := newApp(RateLimitShared(cfg), nil)
			var resp *http.Response
			for range tt.calls {
				resp = get(t, app, "acme")
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			for _, h := range all {
				// A header missing from want must be absent: Get gives "".
				if got, want := resp.Header.Get(h), tt.want[h]; got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestPolicyWindowRoundsUp(t *testing.T) {
	app := newApp(RateLimitShared(Config{Counter: CounterStore(&fakeCounter{}), Limit: 7, Window: 1500 * time.Millisecond}), nil)
	if got := get(t, app, "").Header.Get("RateLimit-Policy"); got != `"default";q=7;w=2` {
		t.Errorf("RateLimit-Policy = %q, want %q", got, `"default";q=7;w=2`)
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

func TestConfigPanics(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero limit", Config{Limit: 0, Window: time.Second}, "Limit"},
		{"negative IPv6 prefix", Config{Limit: 1, Window: time.Second, IPv6Prefix: -1}, "IPv6Prefix"},
		{"IPv6 prefix past 128", Config{Limit: 1, Window: time.Second, IPv6Prefix: 129}, "IPv6Prefix"},
		{"negative limit", Config{Limit: -1, Window: time.Second}, "Limit"},
		{"zero window", Config{Limit: 1, Window: 0}, "Window"},
		{"negative window", Config{Limit: 1, Window: -time.Second}, "Window"},
		{"nanosecond window", Config{Limit: 1, Window: time.Nanosecond}, "Window"},
		{"window under a millisecond", Config{Limit: 1, Window: 999 * time.Microsecond}, "Window"},
		{"year-long window", Config{Limit: 1, Window: 365 * 24 * time.Hour}, "Window"},
		{"window just over a day", Config{Limit: 1, Window: 24*time.Hour + time.Millisecond}, "Window"},
		{"negative store timeout", Config{Limit: 1, Window: time.Second, StoreTimeout: -1}, "StoreTimeout"},
		{"nanosecond store timeout", Config{Limit: 1, Window: time.Second, StoreTimeout: time.Nanosecond}, "StoreTimeout"},
		{"hour-long store timeout", Config{Limit: 1, Window: time.Second, StoreTimeout: time.Hour}, "StoreTimeout"},
		{"negative breaker failures", Config{Limit: 1, Window: time.Second, BreakerFailures: -1}, "BreakerFailures"},
		{"negative breaker cooldown", Config{Limit: 1, Window: time.Second, BreakerCooldown: -time.Second}, "BreakerCooldown"},
		{"day-long breaker cooldown", Config{Limit: 1, Window: time.Second, BreakerCooldown: 24 * time.Hour}, "BreakerCooldown"},
		{"negative fallback limit", Config{Limit: 1, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: -1}, "FallbackLimit"},
		{"fallback limit without fallback", Config{Limit: 1, Window: time.Second, FallbackLimit: 5}, "Fallback"},
		{"fallback limit above the limit", Config{Limit: 4, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: 5}, "FallbackLimit 5 is above Limit 4"},
		{"metrics used twice", Config{Limit: 1, Window: time.Second, Metrics: usedMetrics()}, "Metrics"},
		{"name too long", Config{Name: strings.Repeat("n", maxName+1), Limit: 1, Window: time.Second}, "Name"},
		{"name with a space", Config{Name: "two words", Limit: 1, Window: time.Second}, "Name"},
		{"name with a quote", Config{Name: `say"hi"`, Limit: 1, Window: time.Second}, "Name"},
		{"name with a backslash", Config{Name: `back\slash`, Limit: 1, Window: time.Second}, "Name"},
		{"name not ASCII", Config{Name: "café", Limit: 1, Window: time.Second}, "Name"},
		{"name with a control byte", Config{Name: "nul\x00", Limit: 1, Window: time.Second}, "Name"},
		// The counters' keys are already counted in by a handler with
		// Limit 10 per second, unnamed and named "route".
		{"another limit in the same keys", Config{Counter: claimedCounter(""), Limit: 11, Window: time.Second}, "Name"},
		{"another window in the same keys", Config{Counter: claimedCounter(""), Limit: 10, Window: time.Minute}, "Name"},
		{"another limit under the same name", Config{Counter: claimedCounter("route"), Name: "route", Limit: 3, Window: time.Second}, "Name"},
		{"another limit in the same Redis keys", Config{Counter: claimedRedisCounter(), Limit: 11, Window: time.Second}, "Name"},
		{"another algorithm in the same keys", Config{Counter: claimedCounter(""), Limit: 10, Window: time.Second, Algorithm: SlidingWindow}, "Name"},
		{"another burst in the same keys", Config{Counter: bucketCounter(5), Limit: 10, Window: time.Second, Algorithm: TokenBucket, Burst: 6}, "Burst 5"},
		{"plans in the same keys as none", Config{Counter: claimedCounter(""), Limit: 10, Window: time.Second, PlanFor: func(string) Plan { return Plan{} }}, "Name"},
		{"limit past 2^53", Config{Limit: 1<<53 + 1, Window: time.Second}, "Limit"},
		{"fallback limit past 2^53", Config{Limit: 1, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: 1<<53 + 1}, "FallbackLimit"},
		{"unknown algorithm", Config{Limit: 1, Window: time.Second, Algorithm: 4}, "Algorithm"},
		{"a token bucket on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Algorithm: TokenBucket}, "Counter"},
		{"in flight on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Algorithm: InFlight}, "Counter"},
		{"in flight with quotas", Config{Limit: 1, Window: time.Second, Algorithm: InFlight, Quotas: dayAndMonth(1, 1)}, "Quotas"},
		{"sliding window on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Algorithm: SlidingWindow}, "Counter"},
		{"sliding window with a fallback of your own", Config{Limit: 1, Window: time.Second, Algorithm: SlidingWindow, Fallback: CounterStore(&fakeCounter{})}, "Fallback"},
		{"cost on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Cost: func(*fiber.Ctx) int { return 2 }}, "Cost"},
		{"cost with a fallback of your own", Config{Limit: 1, Window: time.Second, Fallback: CounterStore(&fakeCounter{}), Cost: func(*fiber.Ctx) int { return 2 }}, "Fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratelimit: ") || !strings.Contains(msg, tt.field) {
					t.Fatalf("panic = %q, want a message starting %q that names %s", msg, "ratelimit: ", tt.field)
				}
			}()
			RateLimitShared(tt.cfg)
		})
	}
}

func usedMetrics() *Metrics {
	m := &Metrics{}
	RateLimitShared(Config{Limit: 1, Window: time.Second, Metrics: m})
	return m
}

// claimedCounter returns a MemoryCounter that a handler named name
// already counts in, with 10 per second.
func claimedCounter(name string) store.Store {
	c := NewMemoryCounter()
	RateLimitShared(Config{Counter: c, Name: name, Limit: 10, Window: time.Second})
	return c
}

// bucketCounter returns a MemoryCounter that an unnamed token bucket of
// 10 per second and burst counts in.
func bucketCounter(burst int) store.Store {
	c := NewMemoryCounter()
	RateLimitShared(Config{Counter: c, Limit: 10, Window: time.Second, Algorithm: TokenBucket, Burst: burst})
	return c
}

// claimedRedisCounter is claimedCounter's RedisCounter: setup makes no
// call, so its client needs no server.
func claimedRedisCounter() store.Store {
	c := NewRedisCounter(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	RateLimitShared(Config{Counter: c, Limit: 10, Window: time.Second})
	return c
}

// The bounds themselves are valid, and so are the zero values of the
// optional fields: each takes its default. Every function field is
// optional (nil takes the default), so no nil function is a mistake.
func TestConfigBoundsAreAccepted(t *testing.T) {
	for _, cfg := range []Config{
		{Limit: 1, Window: time.Millisecond},
		{Limit: 1, Window: 24 * time.Hour},
		{Limit: 1 << 53, Window: time.Second, StoreTimeout: time.Millisecond, BreakerCooldown: time.Millisecond},
		{Limit: 1, Window: time.Second, StoreTimeout: time.Minute, BreakerCooldown: time.Hour, BreakerFailures: 1},
		{Limit: 1, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: 1},
		{Limit: 1, Window: time.Second, Next: nil, Tenant: nil, LimitReached: nil, Counter: nil, Logger: nil},
	} {
		RateLimitShared(cfg)
	}
	l := newLimiter(Options{Limit: 7, Window: time.Second, Fallback: NewMemoryCounter()}, time.Now)
	if l.opts.StoreTimeout != 100*time.Millisecond || l.opts.BreakerFailures != 5 ||
		l.opts.BreakerCooldown != time.Second || l.fallbackPolicy.limit != 7 {
		t.Errorf("defaults: StoreTimeout %v, BreakerFailures %d, BreakerCooldown %v, FallbackLimit %d; want 100ms, 5, 1s, 7",
			l.opts.StoreTimeout, l.opts.BreakerFailures, l.opts.BreakerCooldown, l.fallbackPolicy.limit)
	}
}

func TestNewRedisCounterPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"nil client": func() { NewRedisCounter(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratelimit: NewRedisCounter: ") {
					t.Fatalf("panic = %q, want a ratelimit: NewRedisCounter: message", msg)
				}
			}()
			f()
		})
	}
}

// A tenant ID is client-controlled more often than it should be. Written
// into a log line it must stay one quoted value, not become lines or fields
// of its own, with either of slog's handlers.
func TestLogLinesCannotBeForged(t *testing.T) {
	forged := "acme\nlevel=ERROR msg=\"forged\" key=rl:admin\n{\"level\":\"ERROR\",\"msg\":\"forged\"}\" tenant=\"x"
	for _, tt := range []struct {
		name    string
		handler func(io.Writer) slog.Handler
		check   func(t *testing.T, line string)
	}{
		{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }, func(t *testing.T, line string) {
			// With the two quoted values taken out, what is left must be
			// the line's own fields, once each.
			rest := line
			for _, attr := range []string{"tenant=" + strconv.Quote(forged), "key=" + strconv.Quote(tenantKey(forged))} {
				if !strings.Contains(rest, attr) {
					t.Fatalf("line lacks %s as one quoted value: %s", attr, line)
				}
				rest = strings.Replace(rest, attr, "", 1)
			}
			for _, field := range []string{"level=", "msg=", "err="} {
				if strings.Count(rest, field) != 1 {
					t.Errorf("%q appears %d times outside the quoted values: %s", field, strings.Count(rest, field), line)
				}
			}
			if strings.Contains(rest, "tenant=") || strings.Contains(rest, "forged") {
				t.Errorf("forged text outside the quoted values: %s", rest)
			}
		}},
		{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) }, func(t *testing.T, line string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line is not one JSON object: %v: %s", err, line)
			}
			if m["tenant"] != forged || m["key"] != tenantKey(forged) || m["msg"] != "ratelimit: counter failed, request decided by fail open" {
				t.Errorf("tenant %q, key %q, msg %q: fields altered", m["tenant"], m["key"], m["msg"])
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			app := newApp(RateLimitShared(Config{
				Counter: CounterStore(&fakeCounter{err: errors.New("dial tcp 10.0.0.7:6379: refused")}), Limit: 1, Window: time.Minute,
				Logger: slog.New(tt.handler(&logs)),
				Tenant: func(*fiber.Ctx) (string, bool) { return forged, true },
			}), nil)
			get(t, app, "")
			lines := logs.lines()
			if len(lines) != 1 {
				t.Fatalf("one failure wrote %d lines, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
			}
			tt.check(t, lines[0])
		})
	}
}

// A long tenant ID is cut in the log; its key still tells it apart.
func TestLogBoundsLongTenantIDs(t *testing.T) {
	logs := newLogRecorder()
	id := strings.Repeat("x", 1<<20)
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(&fakeCounter{err: errors.New("down")}), Limit: 1, Window: time.Minute,
		Logger: logs.logger(),
		Tenant: func(*fiber.Ctx) (string, bool) { return id, true },
	}), nil)
	get(t, app, "")
	lines := logs.lines()
	if len(lines) != 1 {
		t.Fatalf("log = %v, want one line", lines)
	}
	size := len(lines[0].msg)
	for _, v := range lines[0].attrs {
		size += len(v.String())
	}
	if size > 1024 {
		t.Errorf("the line's message and values take %d bytes, want under 1 KiB", size)
	}
	if got, want := lines[0].str("tenant"), id[:maxTenantKey]+"... (1048576 bytes)"; got != want {
		t.Errorf("tenant = %q, want the ID cut, with its length: %q", got, want)
	}
	if got := lines[0].str("key"); got != tenantKey(id) {
		t.Errorf("key = %q, want the digest key %q", got, tenantKey(id))
	}
}

// 429 and 503 bodies say what happened and nothing of the store, the key,
// the tenant or the error.
func TestRefusalsLeakNothing(t *testing.T) {
	const tenant = "tenant-7f3a"
	secret := errors.New("dial tcp 10.0.0.7:6379: i/o timeout")
	n := int64(2)
	for _, tt := range []struct {
		name    string
		counter store.Store
		cfg     Config
		status  int
	}{
		{"over budget", CounterStore(&fakeCounter{result: &n}), Config{}, http.StatusTooManyRequests},
		{"store down, fail closed", CounterStore(&fakeCounter{err: secret}), Config{FailClosed: true}, http.StatusServiceUnavailable},
		{"store down, over the fallback's budget", CounterStore(&fakeCounter{err: secret}), Config{Fallback: CounterStore(&fakeCounter{result: &n})}, http.StatusTooManyRequests},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Counter, cfg.Limit, cfg.Window = tt.counter, 1, time.Minute
			cfg.Logger = slog.New(slog.DiscardHandler)
			resp := get(t, newApp(RateLimitShared(cfg), nil), tenant)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			b := httpresp.Body(t, resp)
			for _, leak := range []string{tenant, "rl:", "10.0.0.7", "6379", "timeout", "dial"} {
				if strings.Contains(b, leak) {
					t.Errorf("body %q leaks %q", b, leak)
				}
			}
			for k, v := range resp.Header {
				if strings.Contains(strings.Join(v, " "), tenant) || strings.Contains(strings.Join(v, " "), "6379") {
					t.Errorf("header %s: %q leaks", k, v)
				}
			}
		})
	}
}

// scripted answers every Incr with the same count and time left.
type scripted struct {
	mu    sync.Mutex
	n     int64
	ttl   time.Duration
	err   error
	keys  []string
	calls int
}

func (s *scripted) Incr(_ context.Context, key string, _ time.Duration) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, key)
	s.calls++
	return s.n, s.err
}

// scriptedStore is scripted as a Store: it answers each Take with its
// count and its time left, or with the window for a time left below 0,
// and fails a count below 1, as a store that did not count.
type scriptedStore struct{ *scripted }

func (s scriptedStore) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.All}, nil
}

func (s scriptedStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	n, err := s.Incr(ctx, string(r.Key), r.Window)
	if err == nil && n <= 0 {
		err = fmt.Errorf("the store returned %d", n)
	}
	if err != nil {
		return err
	}
	left := s.ttl
	if left < 0 {
		left = r.Window
	}
	res.Allowed = n <= r.Limit
	res.Counts[0] = store.Count{N: n, Fits: res.Allowed, Left: left, Length: r.Window}
	return nil
}

func (s scriptedStore) Give(context.Context, *store.Request, store.Marks) error { return nil }
func (s scriptedStore) Reset(context.Context, *store.Request) error             { return nil }

// FuzzHeaders drives the handler with any tenant ID, count, time left,
// limit and window, and checks every header it writes.
func FuzzHeaders(f *testing.F) {
	f.Add("acme", int64(1), int64(30_000), uint32(10), int64(60_000))
	f.Add("acme", int64(11), int64(1), uint32(10), int64(1))
	f.Add("", int64(0), int64(0), uint32(1), int64(1000))
	f.Add("a\r\nX: y", int64(-5), int64(-1), uint32(1<<31), int64(86_400_000))
	f.Add("{x}", int64(1<<62), int64(1<<40), uint32(3), int64(1500))
	f.Fuzz(func(t *testing.T, id string, count, ttlMs int64, limit32 uint32, windowMs int64) {
		limit := int(limit32%(1<<31)) + 1
		win := time.Duration(windowMs%int64(24*time.Hour/time.Millisecond)) * time.Millisecond
		if win <= 0 {
			win = -win + time.Millisecond
		}
		ttl := time.Duration(ttlMs%(1<<40)) * time.Millisecond
		sc := &scripted{n: count, ttl: ttl}
		app := fiber.New()
		app.Use(RateLimitShared(Config{
			Counter: scriptedStore{sc}, Limit: limit, Window: win,
			Tenant: func(*fiber.Ctx) (string, bool) { return id, true },
			Logger: slog.New(slog.DiscardHandler),
		}))
		app.Get("/", func(c *fiber.Ctx) error { return nil })
		resp := getPath(t, app, "/", "")
		get := resp.Header.Get
		for k, vs := range resp.Header {
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") || strings.ContainsAny(k, "\r\n\x00:") {
					t.Fatalf("header %q: %q carries a control byte", k, v)
				}
			}
		}
		if got := sc.keys[0]; got != tenantKey(id) {
			t.Fatalf("key = %q, want %q", got, tenantKey(id))
		}
		if got, want := get("X-RateLimit-Limit"), strconv.Itoa(limit); got != want {
			t.Fatalf("X-RateLimit-Limit = %q, want %q", got, want)
		}
		if got, want := get("RateLimit-Policy"), fmt.Sprintf(`"default";q=%d;w=%d`, limit, window.CeilDiv(win, time.Second)); got != want {
			t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
		}
		status := resp.StatusCode
		if count <= 0 { // a counter that did not count: fail open
			if status != http.StatusOK || get("X-RateLimit-Remaining") != "" || get("RateLimit") != "" {
				t.Fatalf("count %d: status %d, remaining %q, RateLimit %q; want 200 and neither header",
					count, status, get("X-RateLimit-Remaining"), get("RateLimit"))
			}
			return
		}
		remaining := max(int64(limit)-count, 0)
		reset := window.CeilDiv(ttl, time.Second)
		if ttl < 0 {
			reset = window.CeilDiv(win, time.Second)
		}
		if got, want := get("X-RateLimit-Remaining"), strconv.FormatInt(remaining, 10); got != want {
			t.Fatalf("X-RateLimit-Remaining = %q, want %q", got, want)
		}
		if got, want := get("X-RateLimit-Reset"), strconv.FormatInt(reset, 10); got != want {
			t.Fatalf("X-RateLimit-Reset = %q, want %q", got, want)
		}
		if got, want := get("RateLimit"), fmt.Sprintf(`"default";r=%d;t=%d`, remaining, reset); got != want {
			t.Fatalf("RateLimit = %q, want %q", got, want)
		}
		over := count > int64(limit)
		if over != (status == http.StatusTooManyRequests) || over != (get("Retry-After") != "") {
			t.Fatalf("count %d of %d: status %d, Retry-After %q", count, limit, status, get("Retry-After"))
		}
		if over && get("Retry-After") != strconv.FormatInt(reset, 10) {
			t.Fatalf("Retry-After = %q, want %d", get("Retry-After"), reset)
		}
	})
}

// TestConfigOptions checks that Config has every field of Options, and that
// RateLimitShared hands each on to its Limiter.
func TestConfigOptions(t *testing.T) {
	var cfg Config
	want := reflect.ValueOf(&Options{}).Elem()
	dst := reflect.ValueOf(&cfg).Elem()
	for i := range want.NumField() {
		f := want.Type().Field(i)
		cf, ok := dst.Type().FieldByName(f.Name)
		if !ok || cf.Type != f.Type {
			t.Fatalf("Config has no field %s %v, as Options does", f.Name, f.Type)
		}
		v := optionValue(t, f, i)
		want.Field(i).Set(v)
		dst.FieldByIndex(cf.Index).Set(v)
	}
	// Functions are equal only when nil, for DeepEqual: compare them by
	// address, then the rest.
	got := reflect.ValueOf(cfg.options())
	for i := range want.NumField() {
		g, w := got.Field(i), want.Field(i)
		if w.Kind() == reflect.Func {
			if g.Pointer() != w.Pointer() {
				t.Errorf("Config.options().%s is not Config.%[1]s", want.Type().Field(i).Name)
			}
			continue
		}
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			t.Errorf("Config.options().%s = %v, want %v", want.Type().Field(i).Name, g, w)
		}
	}
}

// optionValue is a value of Options' field f, the i-th, that is not its
// zero value, distinct per field.
func optionValue(t *testing.T, f reflect.StructField, i int) reflect.Value {
	t.Helper()
	v := reflect.New(f.Type).Elem()
	switch f.Type.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(i + 1))
	case reflect.Uint8:
		v.SetUint(uint64(i + 1))
	case reflect.String:
		v.SetString(f.Name)
	case reflect.Pointer:
		v.Set(reflect.New(f.Type.Elem()))
	case reflect.Interface:
		v.Set(reflect.ValueOf(NewMemoryCounter()))
	case reflect.Func:
		v.Set(reflect.MakeFunc(f.Type, func([]reflect.Value) []reflect.Value { panic("not called") }))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(f.Type, 1, 1))
	default:
		t.Fatalf("Options.%s: no test value for a %v", f.Name, f.Type)
	}
	return v
}

// FiberMiddleware takes the budget and the rest from its Limiter: a
// Config with any field of Options set panics, naming that field, and a
// Config with none set does not.
func TestFiberMiddlewareNamesALimiterField(t *testing.T) {
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
	FiberMiddleware(lim, Config{Next: func(*fiber.Ctx) bool { return false }, AnonymousByIP: true}) // no panic
	opts := reflect.TypeFor[Options]()
	for i := range opts.NumField() {
		f := opts.Field(i)
		var cfg Config
		reflect.ValueOf(&cfg).Elem().FieldByName(f.Name).Set(optionValue(t, f, i))
		if msg := panicOf(func() { FiberMiddleware(lim, cfg) }); !strings.Contains(msg, "Config."+f.Name+" is set") {
			t.Errorf("Config with %s set: panic %q, want one naming Config.%[1]s", f.Name, msg)
		}
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

package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
)

// The headers the Fiber handler writes on each answer, from the count and
// the time left that the store reports.

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

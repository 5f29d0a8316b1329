package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatewaykit/ratelimit/examples/internal/demo"
)

// newTestApp is the gateway on an in-memory counter, with limit requests
// a minute on every route and 2 a minute on /expensive.
func newTestApp(t *testing.T, limit int) *fiber.App {
	t.Helper()
	s := demo.Settings{Limit: limit, Window: time.Minute, RouteLimit: 2, RouteWindow: time.Minute, Replicas: 1}
	logger := slog.New(slog.DiscardHandler)
	store, err := demo.NewStore(s, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	app, err := newApp(s, store, logger)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// get sends GET path with apiKey (none when empty), and returns the
// response and its body.
func get(t *testing.T, app *fiber.App, path, apiKey string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// untilNextMonth is how long from now until the next month starts, UTC.
func untilNextMonth(now time.Time) time.Duration {
	y, m, _ := now.UTC().Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).Sub(now)
}

// monthSeconds is the length of now's month, UTC, in seconds.
func monthSeconds(now time.Time) int64 {
	y, m, _ := now.UTC().Date()
	start := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return int64(start.AddDate(0, 1, 0).Sub(start) / time.Second)
}

// usage is one limit in the answer of /usage, as ratelimit.Usage encodes
// it (see the package doc).
type usage struct {
	Name      string `json:"name"`
	Limit     int    `json:"limit"`
	Used      int    `json:"used"`
	Remaining int    `json:"remaining"`
	Window    int64  `json:"window"`
	Reset     int64  `json:"reset"`
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func TestUsageListsEveryLimit(t *testing.T) {
	app := newTestApp(t, 5)
	for range 3 {
		get(t, app, "/", "key-acme")
	}
	get(t, app, "/expensive", "key-acme")
	get(t, app, "/", "key-globex")
	before := time.Now()
	get(t, app, "/usage", "key-acme") // spends nothing
	resp, body := get(t, app, "/usage", "key-acme")
	after := time.Now()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /usage: %s, Content-Type %q, %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	// The keys as the package doc spells them (the decoder below would
	// match any case).
	if head := `[{"name":"global","limit":5,"used":4,"remaining":1,"window":60,"reset":`; !strings.HasPrefix(body, head) {
		t.Errorf("GET /usage: %s, want it to start %s", body, head)
	}
	var got []usage
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("GET /usage: %v in %s", err, body)
	}

	if len(got) != 4 {
		t.Fatalf("GET /usage lists %d limits, want global, month, expensive and tokens: %s", len(got), body)
	}
	// The month's reset is read after the request, the test's before.
	month := got[1]
	if lo, hi := seconds(untilNextMonth(after)), seconds(untilNextMonth(before)); month.Reset < lo || month.Reset > hi {
		t.Errorf("month's reset = %d, want %d to %d, until the 1st of next month", month.Reset, lo, hi)
	}
	want := []usage{
		{Name: "global", Limit: 5, Window: 60, Used: 4, Remaining: 1, Reset: got[0].Reset},
		{Name: "month", Limit: 10_000, Window: monthSeconds(before), Used: 4, Remaining: 9996, Reset: month.Reset},
		{Name: "expensive", Limit: 2, Window: 60, Used: 1, Remaining: 1, Reset: got[2].Reset},
		{Name: "tokens", Limit: 1000, Window: 60, Used: 0, Remaining: 1000, Reset: got[3].Reset},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("GET /usage [%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, i := range []int{0, 2} {
		if got[i].Reset < 59 || got[i].Reset > 60 {
			t.Errorf("%s's reset = %d, want about 60", got[i].Name, got[i].Reset)
		}
	}
}

func TestUsageWithoutTenant(t *testing.T) {
	app := newTestApp(t, 5)
	for _, key := range []string{"", "key-nobody"} {
		resp, body := get(t, app, "/usage", key)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("GET /usage with API key %q: %s %s, want 401 with a JSON error", key, resp.Status, body)
		}
	}
}

func TestMonthlyQuotaRefuses(t *testing.T) {
	app := newTestApp(t, 1000) // the free plan's 100 a month refuses first
	for i := range 100 {
		if resp, body := get(t, app, "/", "key-globex"); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s %s", i+1, resp.Status, body)
		}
	}
	before := time.Now()
	resp, _ := get(t, app, "/", "key-globex")
	after := time.Now()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 101 of the free plan: %s, want 429", resp.Status)
	}
	policy := fmt.Sprintf(`"global";q=1000;w=60, "month";q=100;w=%d`, monthSeconds(before))
	if got := resp.Header.Get("RateLimit-Policy"); got != policy {
		t.Errorf("RateLimit-Policy = %s, want %s", got, policy)
	}
	retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	if lo, hi := seconds(untilNextMonth(after)), seconds(untilNextMonth(before)); err != nil || retry < lo || retry > hi {
		t.Errorf("Retry-After = %q, want %d to %d, until the 1st of next month", resp.Header.Get("Retry-After"), lo, hi)
	}

	// A pro tenant is not held back by the free plan's quota.
	if resp, _ := get(t, app, "/", "key-acme"); resp.StatusCode != http.StatusOK ||
		!strings.Contains(resp.Header.Get("RateLimit-Policy"), `"month";q=10000;`) {
		t.Errorf("acme: %s, RateLimit-Policy %s; want 200 on the pro plan", resp.Status, resp.Header.Get("RateLimit-Policy"))
	}
}

// A request that /expensive's limiter refuses spends nothing of the
// global budget either: the global limiter gives back what it took.
func TestRefusedExpensiveSpendsNoGlobalBudget(t *testing.T) {
	app := newTestApp(t, 5)
	var codes []int
	for range 5 {
		resp, _ := get(t, app, "/expensive", "key-globex")
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 429 429 429]" {
		t.Fatalf("/expensive answered %v, want [200 200 429 429 429]", codes)
	}
	resp, _ := get(t, app, "/", "key-globex")
	if rl := resp.Header.Get("RateLimit"); resp.StatusCode != http.StatusOK || !strings.Contains(rl, `"global";r=2;`) {
		t.Fatalf("/ after them: %d, RateLimit %q; want 200 with 2 left of 5: the 2 allowed and this one spent, the refused not", resp.StatusCode, rl)
	}
}

// /v1/complete admits a call while the tenant has a token left, then
// charges what the upstream reported, 37 tokens a call: the 28th call
// (999 spent before it) is admitted and leaves a debt of 36, and the
// 29th is refused until the next minute.
func TestCompleteChargesTheTokensUsed(t *testing.T) {
	app := newTestApp(t, 100)
	for i := range 28 {
		resp, body := get(t, app, "/v1/complete", "key-acme")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Upstream-Tokens") != "37" {
			t.Fatalf("call %d: %s, X-Upstream-Tokens %q, %s", i+1, resp.Status, resp.Header.Get("X-Upstream-Tokens"), body)
		}
	}
	resp, _ := get(t, app, "/v1/complete", "key-acme")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("RateLimit"), `"tokens";r=0;`) {
		t.Fatalf("call 29: %s, RateLimit %q; want 429 with no tokens left", resp.Status, resp.Header.Get("RateLimit"))
	}
	if retry, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || retry < 1 || retry > 60 {
		t.Errorf("Retry-After %q, want the rest of the minute", resp.Header.Get("Retry-After"))
	}
	_, body := get(t, app, "/usage", "key-acme")
	var got []usage
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got) != 4 {
		t.Fatalf("GET /usage: %v, %s", err, body)
	}
	if tokens := got[3]; tokens.Name != "tokens" || tokens.Used != 28*37 || tokens.Remaining != 0 {
		t.Errorf("GET /usage: tokens %+v, want %d used and none left", tokens, 28*37)
	}
	// Another tenant's budget is its own.
	if resp, _ := get(t, app, "/v1/complete", "key-globex"); resp.StatusCode != http.StatusOK {
		t.Errorf("globex: %s, want 200", resp.Status)
	}
}

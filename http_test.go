package ratelimit

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestRemoteAddr(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"203.0.113.9:41000", "203.0.113.9"},
		{"[2001:db8::1]:41000", "2001:db8::1"},
		{"[fe80::1%eth0]:41000", "fe80::1%eth0"},
		{"203.0.113.9", "203.0.113.9"}, // no port, as some test servers set it
		{"pipe", ""},                   // not an address: counts under rl:unknown
		{"", ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		var want netip.Addr
		if tt.want != "" {
			want = netip.MustParseAddr(tt.want)
		}
		if got := remoteAddr(r); got != want {
			t.Errorf("remoteAddr(%q) = %v, want %v", tt.remote, got, want)
		}
	}
}

func TestHTTPMiddlewareNeedsLimiter(t *testing.T) {
	defer func() {
		if msg, _ := recover().(string); !strings.HasPrefix(msg, "ratelimit: HTTPMiddleware needs a Limiter") {
			t.Fatalf("panic = %q, want one that names the missing Limiter", msg)
		}
	}()
	HTTPMiddleware(nil, HTTPConfig{})
}

// ProblemDetails answers a refusal as RFC 9457 problem details, with the
// draft's quota-exceeded type and the policy the request violated.
func TestProblemDetails(t *testing.T) {
	lim := NewLimiter(Options{Name: "search", Limit: 1, Window: time.Minute})
	h := HTTPMiddleware(lim, HTTPConfig{LimitReached: ProblemDetails})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func() *http.Response {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(WithTenant(context.Background(), "acme")))
		return rec.Result()
	}
	serve()
	resp := serve()
	var body struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/problem+json" ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Content-Type %q, Retry-After %q; want 429, application/problem+json, set",
			resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"))
	}
	if body.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || body.Status != 429 ||
		len(body.Violated) != 1 || body.Violated[0] != "search" || !strings.Contains(body.Detail, "1 per 1m0s") {
		t.Fatalf("body %+v; want the quota-exceeded type, status 429, the search policy violated", body)
	}
	if _, ok := DecisionFromContext(context.Background()); ok {
		t.Error("DecisionFromContext found a decision in a context without one")
	}
}

// A refusal's detail names a calendar period as one, and gives when to
// retry as a date beside the seconds: a calendar period's end exactly.
func TestRefusalDetail(t *testing.T) {
	for _, c := range []struct {
		quotas []Quota
		want   string
	}{
		{nil, `the "default" policy allows 1 per 1m0s; retry after 60 s (2026-01-01T10:31:00Z)`},
		{[]Quota{{Name: "day", Limit: 1, Calendar: CalendarDay}}, `the "day" policy allows 1 per day; retry after 48600 s (2026-01-02T00:00:00Z)`},
		{[]Quota{{Name: "week", Limit: 1, Calendar: CalendarWeek}}, `the "week" policy allows 1 per ISO week; retry after 307800 s (2026-01-05T00:00:00Z)`},
		{[]Quota{{Name: "month", Limit: 1, Calendar: CalendarMonth}}, `the "month" policy allows 1 per month; retry after 2640600 s (2026-02-01T00:00:00Z)`},
		{[]Quota{{Name: "year", Limit: 1, Calendar: CalendarYear}}, `the "year" policy allows 1 per year; retry after 31498200 s (2027-01-01T00:00:00Z)`},
	} {
		clock := newFakeClock()
		clock.Advance(10*time.Hour + 30*time.Minute) // Thursday, 10:30 UTC
		limit := 100
		if c.quotas == nil {
			limit = 1
		}
		lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: limit, Window: time.Minute, Quotas: c.quotas}, clock.Now)
		lim.Take(context.Background(), "acme")
		d := lim.Take(context.Background(), "acme")
		if got := refusalDetail(&d, clock.Now()); d.Allowed || got != c.want {
			t.Errorf("refused %v, detail %q; want %q", !d.Allowed, got, c.want)
		}
	}
}

// RedisLogger writes go-redis's lines through slog, one a second at most.
func TestRedisLogger(t *testing.T) {
	rec := newLogRecorder()
	l := RedisLogger(rec.logger())
	for range 3 {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %s\n", 5, "connection refused")
	}
	lines := rec.withMsg("ratelimit: go-redis says")
	if len(lines) != 1 || lines[0].level != slog.LevelWarn ||
		lines[0].str("line") != "redis: connection pool: failed to dial after 5 attempts: connection refused" {
		t.Fatalf("log %v; want one warning with go-redis's line", rec.lines())
	}
}

package ratelimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// plans is a PlanFor that a test changes as it goes.
type plans struct {
	mu sync.Mutex
	by map[string]Plan
}

func (p *plans) set(tenant string, plan Plan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[string]Plan{}
	}
	p.by[tenant] = plan
}

func (p *plans) planFor(tenant string) Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[tenant]
}

// A plan change applies from the tenant's next request: an upgrade is
// never refused from a refusal the over-limit cache learned under the old
// plan, and a downgrade refuses at once what the tenant has spent past the
// new limit.
func TestPlanChangeAppliesAtOnce(t *testing.T) {
	p := &plans{}
	eachTakeSubject(t, Options{Limit: 100, Window: time.Minute, PlanFor: p.planFor}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		ctx := context.Background()
		p.set(tenant, Plan{Limit: 2})
		for i, want := range []bool{true, true, false, false} {
			if d := lim.Take(ctx, tenant); d.Allowed != want || d.Limit != 2 {
				t.Fatalf("plan of 2, request %d: allowed %v, limit %d; want %v, 2", i+1, d.Allowed, d.Limit, want)
			}
		}
		p.set(tenant, Plan{Limit: 5})
		for i := range 3 {
			if d := lim.Take(ctx, tenant); !d.Allowed || d.Limit != 5 || d.Remaining != 2-i {
				t.Fatalf("upgraded to 5, request %d: %+v; want allowed, remaining %d", i+1, d, 2-i)
			}
		}
		p.set(tenant, Plan{Limit: 3})
		if d := lim.Take(ctx, tenant); d.Allowed || d.Remaining != 0 || d.Limit != 3 {
			t.Fatalf("downgraded to 3 with 5 spent: %+v; want refused, remaining 0, limit 3", d)
		}
		// Back to the Options budget.
		p.set(tenant, Plan{})
		if d := lim.Take(ctx, tenant); !d.Allowed || d.Limit != 100 || d.Remaining != 94 {
			t.Fatalf("no plan, with 5 spent: %+v; want allowed, limit 100, remaining 94", d)
		}
	})
}

// A tenant's window may change. A fixed window already running keeps the
// length it began with, and the new length applies from the tenant's next
// window; a sliding window starts afresh in windows of the new length.
func TestPlanWindowChange(t *testing.T) {
	p := &plans{}
	eachTakeSubject(t, Options{Limit: 2, Window: time.Minute, PlanFor: p.planFor}, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		lim.Take(ctx, tenant)
		lim.Take(ctx, tenant)
		p.set(tenant, Plan{Window: 200 * time.Millisecond})
		d := lim.Take(ctx, tenant)
		if lim.opts.Algorithm == SlidingWindow {
			if !d.Allowed || d.Window != 200*time.Millisecond {
				t.Fatalf("sliding window of a new length: %+v; want allowed, in 200ms windows", d)
			}
			return
		}
		if d.Allowed || d.Reset < 30*time.Second || d.Window != 200*time.Millisecond {
			t.Fatalf("fixed window, new length: %+v; want refused, with the minute's window still running", d)
		}
		// The running window is the minute's: 200 ms later it still is.
		advance(300 * time.Millisecond)
		if d := lim.Take(ctx, tenant); d.Allowed {
			t.Fatalf("300 ms later: %+v; want refused: the running window keeps its minute", d)
		}
	})
}

// A plan that cannot be (a negative limit, a window out of bounds, a
// burst on a fixed window), or a PlanFor that panics, is the gateway's
// mistake: the request is decided by the limiter's own Limit and Window,
// never unlimited, and logged with the tenant and why; never a panic.
func TestInvalidPlanIsDecidedByTheLimitersOwnBudget(t *testing.T) {
	plans := []func(string) Plan{
		func(string) Plan { return Plan{Limit: -1} },
		func(string) Plan { return Plan{Window: time.Microsecond} },
		func(string) Plan { return Plan{Window: 25 * time.Hour} },
		func(string) Plan { return Plan{Limit: 1<<53 + 1} },
		func(string) Plan { return Plan{Limit: 1000, Burst: 5} },
		func(string) Plan { panic("plans table not loaded") },
	}
	for i, planFor := range plans {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			rec := newLogRecorder()
			ctx := context.Background()
			for _, opts := range []Options{
				{Limit: 3, Window: time.Minute, PlanFor: planFor, Logger: rec.logger()},
				{Limit: 3, Window: time.Minute, PlanFor: planFor, FailClosed: true, Logger: rec.logger()},
				{Limit: 3, Window: time.Minute, PlanFor: planFor, Fallback: NewMemoryCounter(), FallbackLimit: 1, Logger: rec.logger()},
			} {
				lim := NewLimiter(opts)
				for n := 1; n <= 4; n++ {
					d := lim.Take(ctx, "acme")
					if d.Allowed != (n <= 3) || d.By != ByCounter || d.Limit != 3 || d.Window != time.Minute {
						t.Fatalf("request %d: %+v; want decided by the counter at the limiter's own 3 a minute", n, d)
					}
				}
			}
			lines := rec.withMsg("ratelimit: PlanFor gave no valid plan")
			if len(lines) == 0 || lines[0].str("tenant") != "acme" || !strings.Contains(strings.ToLower(lines[0].str("err")), "plan") {
				t.Fatalf("log %v; want a line with the tenant and why", rec.lines())
			}
			if len(lines) != 3 {
				t.Errorf("%d lines for 12 requests of three limiters; want one each, a second at most", len(lines))
			}
		})
	}
}

// With plans, the fallback gives each tenant its plan's share of
// FallbackLimit: FallbackLimit / Limit of its plan's limit.
func TestFallbackScalesWithThePlan(t *testing.T) {
	failing := NewMemoryCounter()
	failing.Close()
	lim := NewLimiter(Options{Counter: failing, Limit: 100, Window: time.Minute, Fallback: NewMemoryCounter(), FallbackLimit: 10,
		PlanFor: func(tenant string) Plan {
			if tenant == "gold" {
				return Plan{Limit: 1000}
			}
			return Plan{}
		}, Logger: newLogRecorder().logger()})
	if d := lim.Take(context.Background(), "gold"); d.By != ByFallback || d.Limit != 100 {
		t.Fatalf("gold: %+v; want the fallback's 100, a tenth of its plan as 10 is of 100", d)
	}
	if d := lim.Take(context.Background(), "free"); d.By != ByFallback || d.Limit != 10 {
		t.Fatalf("free: %+v; want the fallback's 10", d)
	}
}

// Shadow mode logs would-be refusals, one line a second at most, with the
// tenant.
func TestShadowModeLogs(t *testing.T) {
	clock := newFakeClock()
	rec := newLogRecorder()
	m := &Metrics{}
	lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: 1, Window: time.Minute, Shadow: true, Metrics: m, Logger: rec.logger()}, clock.Now)
	for range 5 {
		if d := lim.Take(context.Background(), "acme"); !d.Allowed {
			t.Fatalf("shadow mode refused: %+v", d)
		}
	}
	clock.Advance(time.Second)
	d := lim.Take(context.Background(), "acme")
	if !d.Allowed || !d.Shadowed || d.By != ByCounter || d.Remaining != 0 {
		t.Fatalf("a would-be refusal: %+v; want allowed, shadowed, with the counter's figures", d)
	}
	lines := rec.withMsg("ratelimit: shadow mode let through")
	if len(lines) != 2 || lines[0].str("tenant") != "acme" {
		t.Fatalf("log lines %v; want two, a second apart, with the tenant", lines)
	}
	if n, _ := lines[1].int("suppressed"); n != 3 {
		t.Errorf("second line says %d suppressed, want 3", n)
	}
	if s := m.Snapshot(); s.ShadowLimited != 5 || s.Allowed != 1 {
		t.Errorf("metrics %+v; want 1 allowed, 5 shadow-limited", s)
	}
}

// closedCounter is a counter that fails every request: a MemoryCounter
// after its Close.
func closedCounter() *MemoryCounter {
	c := NewMemoryCounter()
	c.Close()
	return c
}

// While the counter fails, the fallback counts a tenant in its plan's
// window, not in Options.Window: the Decision and the headers report the
// plan's window, Reset and RetryAfter are within it, and the budget comes
// back once the plan's windows have passed.
func TestFallbackCountsInThePlansWindow(t *testing.T) {
	const planWindow = 10 * time.Second
	for _, tc := range []struct {
		algo Algorithm
		// How long a spent budget takes to come back: a fixed window's
		// end, or a sliding window's count falling over two windows.
		back time.Duration
	}{
		{FixedWindow, planWindow},
		{SlidingWindow, 2 * planWindow},
	} {
		t.Run(tc.algo.String(), func(t *testing.T) {
			clock := newFakeClock()
			lim := newLimiter(Options{Counter: closedCounter(), Limit: 10, Window: time.Minute, Algorithm: tc.algo,
				PlanFor:  func(string) Plan { return Plan{Window: planWindow} },
				Fallback: newMemoryCounter(clock.Now), FallbackLimit: 2, Logger: newLogRecorder().logger()}, clock.Now)
			ctx := context.Background()
			for i := range 2 {
				d := lim.Take(ctx, "acme")
				if !d.Allowed || d.By != ByFallback || d.Limit != 2 || d.Window != planWindow || d.Reset <= 0 || d.Reset > tc.back {
					t.Fatalf("request %d: %+v; want allowed by the fallback's 2, in the plan's %v window, Reset within %v",
						i+1, d, planWindow, tc.back)
				}
				if got, want := http2Header(d).Get("RateLimit-Policy"), `"default";q=2;w=10`; got != want {
					t.Errorf("request %d: RateLimit-Policy %q, want %q", i+1, got, want)
				}
			}
			d := lim.Take(ctx, "acme")
			if d.Allowed || d.By != ByFallback || d.Window != planWindow || d.RetryAfter <= 0 || d.RetryAfter > tc.back {
				t.Fatalf("request 3: %+v; want refused by the fallback, in the plan's %v window, RetryAfter within %v",
					d, planWindow, tc.back)
			}
			clock.Advance(tc.back)
			if d := lim.Take(ctx, "acme"); !d.Allowed || d.By != ByFallback {
				t.Fatalf("%v later: %+v; want allowed: the plan's windows have passed", tc.back, d)
			}
		})
	}
}

// In shadow mode a limiter writes no rate limit header field, whoever
// decides: also when the counter fails and the fallback decides, whether
// it allows the request or would refuse it.
func TestShadowModeWritesNoHeadersWhenTheFallbackDecides(t *testing.T) {
	fields := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}
	doors := []struct {
		name string
		// serve returns a function that sends a request of tenant acme
		// through lim's middleware, to a handler that answers 200.
		serve func(t *testing.T, lim *Limiter) func() *http.Response
	}{
		{"Fiber v2", func(t *testing.T, lim *Limiter) func() *http.Response {
			app := newApp(FiberMiddleware(lim, Config{}), nil)
			return func() *http.Response { return get(t, app, "acme") }
		}},
		{"net/http", func(_ *testing.T, lim *Limiter) func() *http.Response {
			h := HTTPMiddleware(lim, HTTPConfig{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			return func() *http.Response {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(WithTenant(context.Background(), "acme")))
				return rec.Result()
			}
		}},
	}
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			clock := newFakeClock()
			m := &Metrics{}
			lim := newLimiter(Options{Counter: closedCounter(), Limit: 10, Window: time.Minute, Shadow: true,
				Fallback: newMemoryCounter(clock.Now), FallbackLimit: 1, Metrics: m, Logger: newLogRecorder().logger()}, clock.Now)
			serve := door.serve(t, lim)
			for _, request := range []string{"allowed by the fallback", "that the fallback would refuse"} {
				resp := serve()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request %s: status %d, want 200", request, resp.StatusCode)
				}
				for _, f := range fields {
					if v, ok := resp.Header[http.CanonicalHeaderKey(f)]; ok {
						t.Errorf("request %s: %s = %q; want no rate limit field in shadow mode", request, f, v)
					}
				}
			}
			want := map[DecisionCount]bool{
				{Outcome: "allowed", By: ByFallback, Count: 1}:        true,
				{Outcome: "shadow-limited", By: ByFallback, Count: 1}: true,
			}
			s := m.Snapshot()
			counted := 0
			for _, c := range s.Decisions {
				if c.Count > 0 {
					delete(want, c)
					counted++
				}
			}
			if len(want) != 0 || counted != 2 {
				t.Errorf("decisions %+v; want one allowed by the fallback and one it would have refused", s.Decisions)
			}
		})
	}
}

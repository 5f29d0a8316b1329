package ratelimit

import (
	"context"
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

// A plan with a negative limit, or a window out of bounds, is the
// gateway's mistake: the request is decided as a counter failure is, by
// the fallback or failing open or closed, and logged; never a panic.
func TestInvalidPlanIsDecidedAsAFailure(t *testing.T) {
	for _, bad := range []Plan{{Limit: -1}, {Window: time.Microsecond}, {Window: 25 * time.Hour}, {Limit: 1<<53 + 1}} {
		t.Run("", func(t *testing.T) {
			rec := newLogRecorder()
			planFor := func(string) Plan { return bad }
			ctx := context.Background()
			open := NewLimiter(Options{Limit: 10, Window: time.Minute, PlanFor: planFor, Logger: rec.logger()})
			if d := open.Take(ctx, "acme"); !d.Allowed || d.By != ByNone || d.Err == nil {
				t.Fatalf("plan %+v: %+v; want failed open, with the error", bad, d)
			}
			closed := NewLimiter(Options{Limit: 10, Window: time.Minute, PlanFor: planFor, FailClosed: true, Logger: rec.logger()})
			if d := closed.Take(ctx, "acme"); d.Allowed || d.By != ByNone {
				t.Fatalf("plan %+v, FailClosed: %+v; want failed closed", bad, d)
			}
			fb := NewLimiter(Options{Limit: 10, Window: time.Minute, PlanFor: planFor, Fallback: NewMemoryCounter(), FallbackLimit: 1, Logger: rec.logger()})
			if d := fb.Take(ctx, "acme"); !d.Allowed || d.By != ByFallback || d.Limit != 1 {
				t.Fatalf("plan %+v, with a fallback: %+v; want decided by the fallback's budget of 1", bad, d)
			}
			lines := rec.withMsg("ratelimit: PlanFor returned an invalid plan")
			if len(lines) == 0 || lines[0].str("tenant") != "acme" || !strings.Contains(lines[0].str("err"), "plan") {
				t.Fatalf("log %v; want a line with the tenant and the plan", rec.lines())
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

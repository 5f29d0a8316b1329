package ratelimit

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
)

// A Counter that counts by Incr alone gets fixed windows of cost 1, and
// everything else is refused with a message that says which field needs a
// store that decides it: once, after one "ratelimit: ", never "ratelimit: Cost: ratelimit:".
func TestIncrOnlyCounterRefusalsNameEachFieldOnce(t *testing.T) {
	month := Quota{Name: "month", Limit: 10, Calendar: CalendarMonth}
	incrOnly := func() store.Store { return CounterStore(&fakeCounter{}) }
	base := func() Options { return Options{Limit: 5, Window: time.Minute, Counter: incrOnly()} }
	with := func(f func(*Options)) Options { o := base(); f(&o); return o }
	cases := []struct {
		name, field string
		msg         func() string
	}{
		{"sliding window", "Algorithm", func() string {
			return panicOf(func() { NewLimiter(with(func(o *Options) { o.Algorithm = SlidingWindow })) })
		}},
		{"in flight", "Algorithm", func() string {
			return panicOf(func() { NewLimiter(with(func(o *Options) { o.Algorithm = InFlight })) })
		}},
		{"a fallback that counts by Incr alone", "Algorithm", func() string {
			return panicOf(func() {
				NewLimiter(Options{Limit: 5, Window: time.Minute, Algorithm: SlidingWindow, Fallback: incrOnly()})
			})
		}},
		{"leases", "Leases", func() string {
			return panicOf(func() { NewLimiter(with(func(o *Options) { o.Leases = true })) })
		}},
		{"quotas", "Quotas", func() string {
			return panicOf(func() { NewLimiter(with(func(o *Options) { o.Quotas = []Quota{month} })) })
		}},
		{"a Fiber cost", "Cost", func() string {
			return panicOf(func() {
				FiberMiddleware(NewLimiter(base()), Config{Cost: func(*fiber.Ctx) int { return 2 }})
			})
		}},
		{"a net/http cost", "Cost", func() string {
			return panicOf(func() {
				HTTPMiddleware(NewLimiter(base()), HTTPConfig{Cost: func(*http.Request) int { return 2 }})
			})
		}},
		{"a Fiber skip rule", "SkipFailedRequests", func() string {
			return panicOf(func() { FiberMiddleware(NewLimiter(base()), Config{SkipFailedRequests: true}) })
		}},
		{"a net/http skip rule", "SkipSuccessfulRequests", func() string {
			return panicOf(func() { HTTPMiddleware(NewLimiter(base()), HTTPConfig{SkipSuccessfulRequests: true}) })
		}},
		{"a plan's quotas", "Plan.Quotas", func() string {
			rec := newLogRecorder()
			lim := NewLimiter(with(func(o *Options) {
				o.PlanFor, o.Logger = func(string) Plan { return Plan{Quotas: []Quota{month}} }, rec.logger()
			}))
			lim.Take(context.Background(), "acme")
			lines := rec.withMsg("ratelimit: PlanFor gave no valid plan")
			if len(lines) == 0 {
				return "no line logged"
			}
			return lines[0].str("err")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := c.msg()
			t.Log(msg)
			if !strings.HasPrefix(msg, "ratelimit: "+c.field) {
				t.Errorf("%q does not start with %q", msg, "ratelimit: "+c.field)
			}
			if n := strings.Count(msg, "ratelimit:"); n != 1 {
				t.Errorf("%q says \"ratelimit:\" %d times, want once", msg, n)
			}
			if n := strings.Count(msg, c.field+":"); n > 1 {
				t.Errorf("%q names %s %d times", msg, c.field, n)
			}
			if !strings.Contains(msg, " to decide ") || !strings.Contains(msg, "CounterStore(*ratelimit.fakeCounter) counts by Incr alone") {
				t.Errorf("%q does not say what the field needs a store to decide, and which counter, by Incr alone, it has", msg)
			}
		})
	}
}

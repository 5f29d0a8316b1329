package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// Quotas are decided together with the main limit: a request is allowed
// only when its cost fits in every limit, and a refused one spends nothing
// in any. These tests run on a MemoryCounter (on a fake clock) and on real
// Redis (a single node, a cluster and a ring), in both algorithms.

// dayAndMonth are the quotas of most tests here.
func dayAndMonth(day, month int) []Quota {
	return []Quota{{Name: "day", Limit: day, Calendar: CalendarDay}, {Name: "month", Limit: month, Calendar: CalendarMonth}}
}

// used returns what Usage reports tenant has used of each limit.
func used(t *testing.T, lim *Limiter, tenant string) []int {
	t.Helper()
	us, err := lim.Usage(context.Background(), tenant)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	n := make([]int, len(us))
	for i, u := range us {
		n[i] = u.Used
		if u.Remaining != max(u.Limit-u.Used, 0) {
			t.Errorf("Usage of %s: %+v; Remaining is not Limit - Used", u.Name, u)
		}
	}
	return n
}

func expectUsed(t *testing.T, lim *Limiter, tenant string, want ...int) {
	t.Helper()
	if got := used(t, lim, tenant); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("used %v, want %v (main, day, month)", got, want)
	}
}

// takeExpect takes one request of tenant and checks whether it was
// allowed and, when refused, which limit refused it.
func takeExpect(t *testing.T, lim *Limiter, tenant string, allowed bool, policy string) Decision {
	t.Helper()
	d := lim.Take(context.Background(), tenant)
	if d.Allowed != allowed || d.By != ByCounter && d.By != ByCache || !allowed && d.Policy != policy {
		t.Fatalf("%+v (policy %q); want allowed %v by the counter, refused by %q", d, d.Policy, allowed, policy)
	}
	return d
}

// A refusal by the per-window limit leaves the day's and the month's
// counts as they were, and a refusal by the day's quota leaves the
// window's and the month's.
//
// Each step's requests must fall in one window: each starts just after a
// window's start on the store's clock (see startOfWindow), two starts
// after the step before, so that the window before weighs nothing.
func TestQuotasAllOrNothing(t *testing.T) {
	const window = 150 * time.Millisecond
	opts := Options{Limit: 2, Window: window, Quotas: dayAndMonth(5, 100)}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		startOfWindow(t, lim, advance, window, 1)
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, false, "default")
		takeExpect(t, lim, tenant, false, "default")
		expectUsed(t, lim, tenant, 2, 2, 2)

		startOfWindow(t, lim, advance, window, 2)
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, false, "default")
		expectUsed(t, lim, tenant, 2, 4, 4)

		startOfWindow(t, lim, advance, window, 2)
		takeExpect(t, lim, tenant, true, "")
		d := takeExpect(t, lim, tenant, false, "day")
		expectUsed(t, lim, tenant, 1, 5, 5)
		// Room again at the end of the UTC day, on the store's clock.
		_, end := CalendarDay.Period(time.Now())
		if lim.clock.now != nil {
			_, end = CalendarDay.Period(lim.clock.Now())
		}
		if left := time.Until(end); lim.clock.now == nil && (d.RetryAfter < left-5*time.Second || d.RetryAfter > left+5*time.Second) {
			t.Errorf("RetryAfter %v, want the time to the end of the UTC day, %v", d.RetryAfter, left)
		}
		if d.Limit != 5 || d.Remaining != 0 || d.Window != 24*time.Hour {
			t.Errorf("refused by the day's quota: %+v; want its figures, Limit 5, Remaining 0, Window 24h", d)
		}
		// The main window's room does not let the day's refusal through.
		startOfWindow(t, lim, advance, window, 2)
		takeExpect(t, lim, tenant, false, "day")
		expectUsed(t, lim, tenant, 0, 5, 5)
	})
}

// Quotas with a Window are counted by Options.Algorithm, as the main
// limit is; the smallest room decides.
// The requests before the refusal fall in one window of the quota's (see
// startOfWindow).
func TestQuotaWithAWindow(t *testing.T) {
	const window = 150 * time.Millisecond
	opts := Options{Limit: 10, Window: window, Quotas: []Quota{{Name: "burst", Limit: 3, Window: 2 * window}}}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		startOfWindow(t, lim, advance, 2*window, 1)
		for range 3 {
			takeExpect(t, lim, tenant, true, "")
		}
		d := takeExpect(t, lim, tenant, false, "burst")
		// A sliding window's count weighs in for a window more.
		if d.Window != 2*window || d.RetryAfter <= 0 || d.RetryAfter > 4*window {
			t.Errorf("refused by the quota: %+v; want its window and a RetryAfter within two of them", d)
		}
		expectUsed(t, lim, tenant, 3, 3)
		advance(4*window + 20*time.Millisecond)
		takeExpect(t, lim, tenant, true, "")
	})
}

// A cost that fits in the main limit but not in a quota is refused at
// once, by the quota, without asking the counter; one that fits in all
// spends in all.
func TestQuotaCosts(t *testing.T) {
	opts := Options{Limit: 100, Window: time.Minute, Quotas: dayAndMonth(10, 1000)}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		ctx := context.Background()
		if d := lim.TakeN(ctx, tenant, 11); d.Allowed || d.Policy != "day" || d.Remaining != -1 {
			t.Fatalf("cost 11 against a day's quota of 10: %+v (%s); want refused by day, nothing counted", d, d.Policy)
		}
		if d := lim.TakeN(ctx, tenant, 7); !d.Allowed || d.Policy != "day" || d.Remaining != 3 {
			t.Fatalf("cost 7: %+v (%s); want allowed, the day's quota with 3 left named", d, d.Policy)
		}
		if d := lim.TakeN(ctx, tenant, 4); d.Allowed || d.Policy != "day" {
			t.Fatalf("cost 4 with 3 left today: %+v (%s); want refused by day", d, d.Policy)
		}
		if d := lim.TakeN(ctx, tenant, 3); !d.Allowed {
			t.Fatalf("cost 3 with 3 left today: %+v; want allowed", d)
		}
		expectUsed(t, lim, tenant, 10, 10, 10)
	})
}

// A cost that never fits is refused by the first limit it passes, the
// main one first, then the quotas in their order: a limit it only
// reaches is no reason to refuse it. The refusal carries that limit's
// figures, and nothing is asked of the store.
func TestNeverFitsNamesTheLimitItPasses(t *testing.T) {
	hourAndMinute := []Quota{{Name: "hour", Limit: 5, Window: time.Hour}, {Name: "minute", Limit: 3, Window: time.Minute}}
	minute := []Quota{{Name: "minute", Limit: 3, Window: time.Minute}}
	for _, c := range []struct {
		name   string
		limit  int
		window time.Duration
		quotas []Quota
		cost   int
		policy string // "" for allowed
		wantL  int
		wantW  time.Duration
	}{
		{"reaches the hour, passes the minute", 100, time.Hour, hourAndMinute, 5, "minute", 3, time.Minute},
		{"passes both quotas", 100, time.Hour, hourAndMinute, 6, "hour", 5, time.Hour},
		{"passes the minute alone", 100, time.Hour, hourAndMinute, 4, "minute", 3, time.Minute},
		{"reaches every quota", 100, time.Hour, hourAndMinute, 3, "", 0, 0},
		{"reaches the main limit, passes the minute", 5, time.Hour, minute, 5, "minute", 3, time.Minute},
		{"passes the main limit", 5, time.Hour, minute, 6, "default", 5, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: c.limit, Window: c.window, Quotas: c.quotas,
				Logger: newLogRecorder().logger()}, clock.Now)
			d := lim.TakeN(context.Background(), "acme", c.cost)
			if c.policy == "" {
				if !d.Allowed {
					t.Fatalf("cost %d: %+v (%s); want allowed", c.cost, d, d.Policy)
				}
				return
			}
			if d.Allowed || d.By != ByCounter || d.Policy != c.policy || d.Limit != c.wantL || d.Window != c.wantW || d.Remaining != -1 {
				t.Fatalf("cost %d: allowed %v by %v, policy %q, limit %d, window %v, remaining %d; want refused by %q, %d per %v, nothing asked (-1)",
					c.cost, d.Allowed, d.By, d.Policy, d.Limit, d.Window, d.Remaining, c.policy, c.wantL, c.wantW)
			}
			expectUsed(t, lim, "acme", make([]int, 1+len(c.quotas))...)
		})
	}
}

// Usage spends nothing and reports every limit; Reset gives the tenant
// its whole budget back, and this replica's over-limit cache forgets it.
func TestUsageAndReset(t *testing.T) {
	opts := Options{Limit: 3, Window: time.Minute, Quotas: dayAndMonth(10, 100)}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		ctx := context.Background()
		expectUsed(t, lim, tenant, 0, 0, 0)
		for range 3 {
			takeExpect(t, lim, tenant, true, "")
		}
		for range 3 {
			expectUsed(t, lim, tenant, 3, 3, 3)
		}
		us, _ := lim.Usage(ctx, tenant)
		for i, want := range []struct {
			name   string
			limit  int
			window time.Duration
		}{{"default", 3, time.Minute}, {"day", 10, 24 * time.Hour}, {"month", 100, 0}} {
			u := us[i]
			if u.Name != want.name || u.Limit != want.limit || want.window != 0 && u.Window != want.window || u.Reset <= 0 || u.Reset > 2*u.Window {
				t.Errorf("Usage[%d] = %+v; want %s, limit %d, window %v, a reset within two windows", i, u, want.name, want.limit, want.window)
			}
		}
		if w := us[2].Window; w < 28*24*time.Hour || w > 31*24*time.Hour {
			t.Errorf("the month's window is %v, want the month's length", w)
		}
		takeExpect(t, lim, tenant, false, "default")
		takeExpect(t, lim, tenant, false, "default") // the cache's, on Redis

		if err := lim.Reset(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		expectUsed(t, lim, tenant, 0, 0, 0)
		for range 3 {
			if d := takeExpect(t, lim, tenant, true, ""); d.By != ByCounter {
				t.Fatalf("after Reset: %+v; want decided by the counter", d)
			}
		}
		expectUsed(t, lim, tenant, 3, 3, 3)
	})
}

// A limiter without quotas has Usage and Reset too, over its keys of
// today.
func TestUsageWithoutQuotas(t *testing.T) {
	eachTakeSubject(t, Options{Limit: 2, Window: time.Minute}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		takeExpect(t, lim, tenant, true, "")
		expectUsed(t, lim, tenant, 1)
		if err := lim.Reset(context.Background(), tenant); err != nil {
			t.Fatal(err)
		}
		expectUsed(t, lim, tenant, 0)
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, false, "default")
	})
}

// 600 requests at once across two replicas against 100 a second and 150
// a day: exactly 100 pass, and after the second exactly 50 more.
func TestQuotasExactAcrossReplicas(t *testing.T) {
	for _, s := range takeSubjects {
		for _, algo := range algorithms {
			t.Run(s.name+"/"+algo.String(), func(t *testing.T) {
				t.Parallel()
				c, clock := s.counter(t)
				if clock == nil {
					clearOfTheHour(t)
				}
				opts := Options{Counter: c, Algorithm: algo, Limit: 100, Window: time.Second,
					Quotas: []Quota{{Name: "day", Limit: 150, Calendar: CalendarDay}}, StoreTimeout: 2 * time.Second}
				var replicas []*Limiter
				advance := time.Sleep
				for range 2 {
					if clock != nil {
						replicas = append(replicas, newLimiter(opts, clock.Now))
						advance = clock.Advance
					} else {
						replicas = append(replicas, NewLimiter(opts))
					}
				}
				tenant := uniqueTenant(t)
				if r, ok := c.(*RedisCounter); ok && algo == SlidingWindow {
					// A sliding window weighs in the window before it: a
					// burst that straddles a boundary of the server's
					// windows lets through what the weight allows, a few
					// more than 100 in its second. Start it just after one.
					now, err := r.rdb.Time(context.Background()).Result()
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Second - time.Duration(now.UnixNano()%int64(time.Second)) + 20*time.Millisecond)
				}
				if decided, allowed := burstAtOnce(replicas, tenant, 600); decided != 600 || allowed != 100 {
					t.Fatalf("first second: %d allowed of %d decided by the counter, want 100 of 600", allowed, decided)
				}
				advance(2*time.Second + 10*time.Millisecond) // past a sliding window's weight too
				if decided, allowed := burstAtOnce(replicas, tenant, 600); decided != 600 || allowed != 50 {
					t.Fatalf("later: %d allowed of %d decided by the counter, want the day's last 50 of 600", allowed, decided)
				}
				expectUsed(t, replicas[0], tenant, 50, 150)
			})
		}
	}
}

// The headers list every limit, a calendar period's w being its length;
// X-RateLimit-* and Retry-After report the limit that refused, or the one
// with the fewest left.
func TestQuotaHeaders(t *testing.T) {
	clock := newFakeClock()
	clock.Advance(time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC).Sub(clock.Now()))
	lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: 10, Window: time.Second,
		Quotas: dayAndMonth(10000, 3)}, clock.Now)
	const policy = `"default";q=10;w=1, "day";q=10000;w=86400, "month";q=3;w=2419200`
	for i, want := range []struct {
		status                    int
		limit, remaining, reset   string
		rateLimit, retryAfter, by string
	}{
		{200, "3", "2", "129600", `"default";r=9;t=1, "day";r=9999;t=43200, "month";r=2;t=129600`, "", "month"},
		{200, "3", "1", "129600", `"default";r=8;t=1, "day";r=9998;t=43200, "month";r=1;t=129600`, "", "month"},
		{200, "3", "0", "129600", `"default";r=7;t=1, "day";r=9997;t=43200, "month";r=0;t=129600`, "", "month"},
		{429, "3", "0", "129600", `"default";r=7;t=1, "day";r=9997;t=43200, "month";r=0;t=129600`, "129600", "month"},
	} {
		d := lim.Take(context.Background(), "acme")
		h := http.Header{}
		d.SetHeaders(h)
		status := 200
		if !d.Allowed {
			status = 429
		}
		got := []string{fmt.Sprint(status), h.Get(hLimit), h.Get(hRemaining), h.Get(hReset), h.Get(hPolicy), h.Get(hRateLimit), h.Get(hRetryAfter), d.Policy}
		wantf := []string{fmt.Sprint(want.status), want.limit, want.remaining, want.reset, policy, want.rateLimit, want.retryAfter, want.by}
		if fmt.Sprint(got) != fmt.Sprint(wantf) {
			t.Errorf("request %d:\n got %q\nwant %q", i+1, got, wantf)
		}
	}
	// Fiber's writer says the same.
	app := newApp(FiberMiddleware(lim, Config{}), nil)
	r := get(t, app, "acme")
	if r.StatusCode != 429 || r.Header.Get(hPolicy) != policy || r.Header.Get(hRetryAfter) != "129600" {
		t.Errorf("Fiber v2: %d, policy %q, Retry-After %q", r.StatusCode, r.Header.Get(hPolicy), r.Header.Get(hRetryAfter))
	}
	// On the 1st of March the month starts again, with its 31 days.
	clock.Advance(36 * time.Hour)
	d := lim.Take(context.Background(), "acme")
	h := http.Header{}
	d.SetHeaders(h)
	if !d.Allowed || !strings.Contains(h.Get(hPolicy), `"month";q=3;w=2678400`) {
		t.Errorf("on the 1st of March: %+v, policy %q; want allowed, a month of 31 days", d, h.Get(hPolicy))
	}
}

// A plan's quotas replace the limiter's for its tenant; an empty plan
// list gives none, and quotas that cannot be are the gateway's mistake.
func TestPlanQuotas(t *testing.T) {
	plans := map[string]Plan{
		"pro":  {Limit: 5, Quotas: []Quota{{Name: "month", Limit: 4, Calendar: CalendarMonth}}},
		"free": {Quotas: []Quota{}},
		"bad":  {Quotas: []Quota{{Name: "default", Limit: 4, Calendar: CalendarMonth}}},
	}
	rec := newLogRecorder()
	clock := newFakeClock()
	lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: 2, Window: time.Minute, Logger: rec.logger(),
		Quotas: dayAndMonth(1, 100), PlanFor: func(tenant string) Plan {
			if tenant == "literal" { // a slice made anew for each request
				return Plan{Quotas: []Quota{{Name: "month", Limit: 2, Calendar: CalendarMonth}}}
			}
			return plans[tenant]
		}}, clock.Now)
	for range 2 {
		takeExpect(t, lim, "literal", true, "")
	}
	takeExpect(t, lim, "literal", false, "month")
	if n := len(*lim.planQuotas.sets.Load()); n != 1 {
		t.Errorf("%d quota sets kept for one plan's quotas made anew for each request, want 1", n)
	}
	for range 4 {
		takeExpect(t, lim, "pro", true, "")
	}
	takeExpect(t, lim, "pro", false, "month")
	expectUsed(t, lim, "pro", 4, 4)

	takeExpect(t, lim, "other", true, "")
	takeExpect(t, lim, "other", false, "day")

	takeExpect(t, lim, "free", true, "")
	takeExpect(t, lim, "free", true, "")
	d := takeExpect(t, lim, "free", false, "default")
	h := http.Header{}
	d.SetHeaders(h)
	if h.Get(hPolicy) != `"default";q=2;w=60` {
		t.Errorf("a plan without quotas: policy %q", h.Get(hPolicy))
	}

	// The limiter's own budget: 2 a minute, a day of 1.
	takeExpect(t, lim, "bad", true, "")
	takeExpect(t, lim, "bad", false, "day")
	if lines := rec.withMsg("ratelimit: PlanFor gave no valid plan"); len(lines) != 1 || !strings.Contains(lines[0].str("err"), "Plan.Quotas[0]") {
		t.Errorf("log %v; want the invalid plan logged once, naming Plan.Quotas[0]", rec.lines())
	}
	// A tenant whose plan gains quotas keeps its main count.
	plans["free"] = Plan{Quotas: []Quota{{Name: "week", Limit: 100, Window: 24 * time.Hour}}}
	takeExpect(t, lim, "free", false, "default")
	expectUsed(t, lim, "free", 2, 0)

	// The plan's quota keeps its count by name when the plan changes.
	plans["pro"] = Plan{Limit: 10, Quotas: []Quota{{Name: "month", Limit: 6, Calendar: CalendarMonth}}}
	takeExpect(t, lim, "pro", true, "")
	takeExpect(t, lim, "pro", true, "")
	takeExpect(t, lim, "pro", false, "month")
}

// Setup refuses quotas that cannot be, naming the field.
func TestQuotaSetup(t *testing.T) {
	month := Quota{Name: "month", Limit: 10, Calendar: CalendarMonth}
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"no name", Options{Quotas: []Quota{{Limit: 1, Calendar: CalendarDay}}}, "Quotas[0]: a quota needs a Name"},
		{"a bad name", Options{Quotas: []Quota{{Name: `a"b`, Limit: 1, Calendar: CalendarDay}}}, "Quotas[0]: quota Name"},
		{"two names alike", Options{Quotas: []Quota{month, month}}, "Quotas[1]: Name \"month\" is taken"},
		{"the limiter's name", Options{Name: "month", Quotas: []Quota{month}}, "limiter's own policy name"},
		{"default", Options{Quotas: []Quota{{Name: "default", Limit: 1, Calendar: CalendarDay}}}, "limiter's own policy name"},
		{"no limit", Options{Quotas: []Quota{{Name: "q", Calendar: CalendarDay}}}, "Limit must be between"},
		{"window and calendar", Options{Quotas: []Quota{{Name: "q", Limit: 1, Window: time.Second, Calendar: CalendarDay}}}, "exactly one of Window and Calendar"},
		{"neither", Options{Quotas: []Quota{{Name: "q", Limit: 1}}}, "exactly one of Window and Calendar"},
		{"a long window", Options{Quotas: []Quota{{Name: "q", Limit: 1, Window: 48 * time.Hour}}}, "Window must be between 1ms and 24h0m0s, got 48h0m0s: for a budget per day"},
		{"a calendar of no kind", Options{Quotas: []Quota{{Name: "q", Limit: 1, Calendar: CalendarYear + 1}}}, "Calendar must be CalendarDay, CalendarWeek, CalendarMonth or CalendarYear, got 5"},
		{"too many", Options{Quotas: []Quota{{Name: "a", Limit: 1, Calendar: 1}, {Name: "b", Limit: 1, Calendar: 1},
			{Name: "c", Limit: 1, Calendar: 1}, {Name: "d", Limit: 1, Calendar: 1}, {Name: "e", Limit: 1, Calendar: 1}}}, "at most 4 quotas"},
		{"a Counter of your own", Options{Counter: CounterStore(&fakeCounter{}), Quotas: []Quota{month}}, "Quotas need Counter to decide calendar quotas; CounterStore(*ratelimit.fakeCounter) counts by Incr alone"},
		{"a Fallback of your own", Options{Fallback: CounterStore(&fakeCounter{}), Quotas: []Quota{month}}, "Quotas need Fallback to decide calendar quotas; CounterStore(*ratelimit.fakeCounter) counts by Incr alone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), c.want) {
					t.Errorf("panic %v, want one naming %q", r, c.want)
				}
			}()
			o := c.opts
			o.Limit, o.Window = 10, time.Second
			NewLimiter(o)
		})
	}
	// Two limiters in the same keys must agree on their quotas.
	m := NewMemoryCounter()
	NewLimiter(Options{Counter: m, Limit: 1, Window: time.Second, Quotas: []Quota{month}})
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Quotas") {
			t.Errorf("panic %v, want one naming Quotas", r)
		}
	}()
	NewLimiter(Options{Counter: m, Limit: 1, Window: time.Second})
}

// While the counter fails, the fallback decides the quotas too, in the
// proportion of FallbackLimit to Limit.
func TestQuotasFallbackInProportion(t *testing.T) {
	clock := newFakeClock()
	lim := newLimiter(Options{Counter: NewRedisCounter(redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t)})),
		Fallback: newMemoryCounter(clock.Now), Limit: 10, FallbackLimit: 5, Window: time.Minute,
		Quotas: dayAndMonth(1000, 4), Logger: newLogRecorder().logger()}, clock.Now)
	for range 2 {
		if d := lim.Take(context.Background(), "acme"); !d.Allowed || d.By != ByFallback {
			t.Fatalf("%+v; want allowed by the fallback", d)
		}
	}
	d := lim.Take(context.Background(), "acme")
	h := http.Header{}
	d.SetHeaders(h)
	if d.Allowed || d.By != ByFallback || d.Policy != "month" || d.Limit != 2 ||
		!strings.Contains(h.Get(hPolicy), `"default";q=5;w=60, "day";q=500;w=86400, "month";q=2;`) {
		t.Errorf("%+v (%s), policy %q; want refused by the fallback's month of 2", d, d.Policy, h.Get(hPolicy))
	}
}

// On Redis, a tenant's limits are one hash in its main key's hash slot,
// which expires when its last window or period ends (here the month's, on
// the server's clock), and Usage changes nothing in it.
func TestQuotaKeysOnRedis(t *testing.T) {
	for _, c := range redisClients {
		t.Run(c.name, func(t *testing.T) {
			rdb := c.client(t)
			ctx := context.Background()
			lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Name: "api", Limit: 5, Window: time.Minute,
				Quotas: dayAndMonth(10, 100)})
			tenant := uniqueTenant(t)
			takeExpect(t, lim, tenant, true, "")
			takeExpect(t, lim, tenant, true, "")
			main := "rl:api#" + tenant
			key := "{" + main + "}"
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			dayStart, _ := CalendarDay.Period(now)
			monthStart, monthEnd := CalendarMonth.Period(now)
			h, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			ms := func(tm time.Time) string { return strconv.FormatInt(tm.UnixMilli(), 10) }
			for f, want := range map[string]string{"api": "2", "day": "2", "month": "2", "day:s": ms(dayStart), "month:s": ms(monthStart), "e": ms(monthEnd)} {
				if h[f] != want {
					t.Errorf("HGET %s %s = %q, want %q (%v)", key, f, h[f], want, h)
				}
			}
			if end, err := strconv.ParseInt(h["api:s"], 10, 64); err != nil || time.UnixMilli(end).Sub(now) > time.Minute+time.Second || time.UnixMilli(end).Sub(now) < 58*time.Second {
				t.Errorf("the main window ends at %q, want a minute from now", h["api:s"])
			}
			if ttl, want := rdb.PTTL(ctx, key).Val(), monthEnd.Sub(now); ttl > want+time.Second || ttl < want-2*time.Second {
				t.Errorf("%s expires in %v, want at the month's end, in %v", key, ttl, want)
			}
			if n := rdb.Exists(ctx, main).Val(); n != 0 {
				t.Errorf("%s exists: a limiter with quotas keeps its main count in %s", main, key)
			}
			if cl, ok := rdb.(*redis.ClusterClient); ok {
				if a, b := cl.ClusterKeySlot(ctx, key).Val(), cl.ClusterKeySlot(ctx, main).Val(); a != b {
					t.Errorf("%s in slot %d, %s in %d", key, a, main, b)
				}
			}
			expectUsed(t, lim, tenant, 2, 2, 2)
			if after := rdb.HGetAll(ctx, key).Val(); fmt.Sprint(after) != fmt.Sprint(h) {
				t.Errorf("after Usage %v, want %v", after, h)
			}
			if err := lim.Reset(ctx, tenant); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("%s left after Reset", key)
			}
		})
	}
}

// Usage and Reset on a server that refuses connections fail at once, with
// the dial's error.
func TestUsageNamesARefusedConnection(t *testing.T) {
	lim := NewLimiter(Options{Counter: NewRedisCounter(redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t)})),
		Limit: 1, Window: time.Minute, Quotas: dayAndMonth(10, 100)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := lim.Usage(ctx, "acme")
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
		t.Errorf("Usage: %v after %v; want the refused connection, at once", err, time.Since(start))
	}
	if err := lim.Reset(ctx, "acme"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Reset: %v; want the refused connection", err)
	}
}

// A tenant's hash that holds something else fails that tenant alone, as
// the server's answer about one key: the others are decided, and no
// breaker opens.
func TestQuotaHashThatIsNotAHash(t *testing.T) {
	rdb := newRedisClient(t)
	ctx := context.Background()
	rec := newLogRecorder()
	lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 5, Window: time.Minute, Quotas: dayAndMonth(10, 100),
		Logger: rec.logger(), BreakerFailures: 1})
	bad, good := uniqueTenant(t), uniqueTenant(t)
	if err := rdb.Set(ctx, "{rl:"+bad+"}", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d := lim.Take(ctx, bad); d.By != ByNone || !strings.Contains(fmt.Sprint(d.Err), "something other than") {
			t.Fatalf("a tenant whose hash is a string: %+v; want decided without the counter, the key named", d)
		}
	}
	takeExpect(t, lim, good, true, "")
	if _, err := lim.Usage(ctx, bad); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Usage: %v; want the server's WRONGTYPE", err)
	}
	if lines := rec.withMsg("ratelimit: circuit breaker open"); len(lines) != 0 {
		t.Errorf("the breaker opened: %v", lines)
	}
}

// A week's and a year's quota report their periods in the headers: the
// length in RateLimit-Policy (w), the time to the period's end in
// RateLimit (t), and the figures of the quota that refused in the
// X-RateLimit fields and Retry-After. The memory clock starts on Thursday
// 1 January 2026, four days before the week ends and a year before the
// year does; on Redis the periods are the server's now.
func TestQuotaWeekAndYearHeaders(t *testing.T) {
	opts := Options{Limit: 100, Window: time.Minute,
		Quotas: []Quota{{Name: "week", Limit: 3, Calendar: CalendarWeek}, {Name: "year", Limit: 1000, Calendar: CalendarYear}}}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		now, slack := time.Now(), 5*time.Second
		if lim.clock.now != nil {
			now, slack = lim.clock.Now(), 0
		}
		weekStart, weekEnd := CalendarWeek.Period(now)
		yearStart, yearEnd := CalendarYear.Period(now)
		if lim.clock.now != nil && (weekEnd.Sub(now) != 4*24*time.Hour || yearEnd.Sub(now) != 365*24*time.Hour) {
			t.Fatalf("at %v the week ends in %v and the year in %v; want 4 days (a Thursday) and 365 days",
				now, weekEnd.Sub(now), yearEnd.Sub(now))
		}
		secs := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
		near := func(field string, got string, want time.Duration) {
			t.Helper()
			n, err := strconv.ParseInt(got, 10, 64)
			if err != nil || float64(n) < (want-slack).Seconds() || float64(n) > (want+slack+time.Second).Seconds() {
				t.Errorf("%s = %q, want about %d s", field, got, secs(want))
			}
		}
		for range 3 {
			takeExpect(t, lim, tenant, true, "")
		}
		d := takeExpect(t, lim, tenant, false, "week")
		h := http.Header{}
		d.SetHeaders(h)
		policy := fmt.Sprintf(`"default";q=100;w=60, "week";q=3;w=604800, "year";q=1000;w=%d`, secs(yearEnd.Sub(yearStart)))
		if weekEnd.Sub(weekStart) != 7*24*time.Hour || h.Get(hPolicy) != policy {
			t.Errorf("%s: %q, want %q", hPolicy, h.Get(hPolicy), policy)
		}
		items := strings.Split(h.Get(hRateLimit), ", ")
		if len(items) != 3 || !strings.HasPrefix(items[1], `"week";r=0;t=`) || !strings.HasPrefix(items[2], `"year";r=997;t=`) {
			t.Fatalf("%s: %q, want the week's with 0 left and the year's with 997", hRateLimit, h.Get(hRateLimit))
		}
		near(hRateLimit+" of the week", strings.TrimPrefix(items[1], `"week";r=0;t=`), weekEnd.Sub(now))
		near(hRateLimit+" of the year", strings.TrimPrefix(items[2], `"year";r=997;t=`), yearEnd.Sub(now))
		if h.Get(hLimit) != "3" || h.Get(hRemaining) != "0" {
			t.Errorf("X-RateLimit: limit %q, remaining %q; want the week's 3 and 0", h.Get(hLimit), h.Get(hRemaining))
		}
		near(hReset, h.Get(hReset), weekEnd.Sub(now))
		near(hRetryAfter, h.Get(hRetryAfter), weekEnd.Sub(now))
		if d.Window != 7*24*time.Hour {
			t.Errorf("Decision.Window = %v, want the week's 168h", d.Window)
		}
		expectUsed(t, lim, tenant, 3, 3, 3)
		us, err := lim.Usage(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		if w, y := us[1], us[2]; w.Window != 7*24*time.Hour || y.Window != yearEnd.Sub(yearStart) ||
			(w.Reset-weekEnd.Sub(now)).Abs() > slack+time.Second || (y.Reset-yearEnd.Sub(now)).Abs() > slack+time.Second {
			t.Errorf("Usage: week %+v, year %+v; want their periods' lengths, and the time to their ends (%v, %v)",
				w, y, weekEnd.Sub(now), yearEnd.Sub(now))
		}
	})
}

// A window past 24 hours is a budget per week, month or year, which a
// Quota with a Calendar counts: Options.Window's setup panic, a quota's,
// and a plan's error say so and name the periods. A window of exactly
// 24 hours is one; one below a millisecond is refused without the hint.
func TestWindowPastADayPointsToCalendarQuotas(t *testing.T) {
	hint := "give the limiter a Quota with a Calendar (CalendarDay, CalendarWeek, CalendarMonth or CalendarYear) in Options.Quotas or Plan.Quotas"
	panicOf := func(o Options) string {
		var msg string
		func() {
			defer func() { msg = fmt.Sprint(recover()) }()
			NewLimiter(o)
		}()
		return msg
	}
	week := 7 * 24 * time.Hour
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"Options.Window", Options{Limit: 10, Window: week}, "ratelimit: Window must be between 1ms and 24h0m0s, got 168h0m0s: for a budget per day, week, month or year, " + hint},
		{"Options.Window a nanosecond past a day", Options{Limit: 10, Window: 24*time.Hour + 1},
			"ratelimit: Window must be between 1ms and 24h0m0s, got 24h0m0.000000001s: for a budget per day, week, month or year, " + hint},
		{"a quota's Window", Options{Limit: 10, Window: time.Second, Quotas: []Quota{{Name: "w", Limit: 1, Window: week}}},
			`ratelimit: Quotas[0]: quota "w": Window must be between 1ms and 24h0m0s, got 168h0m0s: for a budget per day, week, month or year, ` + hint},
		{"Options.Window below a millisecond", Options{Limit: 10, Window: time.Microsecond}, "ratelimit: Window must be between 1ms and 24h0m0s, got 1µs"},
	} {
		if got := panicOf(c.opts); got != c.want {
			t.Errorf("%s: panic %q, want %q", c.name, got, c.want)
		}
	}
	if got := panicOf(Options{Limit: 10, Window: 24 * time.Hour}); got != "<nil>" {
		t.Errorf("Options.Window of 24h: panic %q, want none", got)
	}
	rec := newLogRecorder()
	lim := NewLimiter(Options{Limit: 10, Window: time.Minute, Logger: rec.logger(),
		PlanFor: func(string) Plan { return Plan{Limit: 100, Window: week} }})
	d := lim.Take(context.Background(), "acme")
	lines := rec.withMsg("ratelimit: PlanFor gave no valid plan")
	if want := "ratelimit: plan {Limit:100 Window:168h0m0s}: Window must be between 1ms and 24h0m0s, got 168h0m0s: " +
		"for a budget per day, week, month or year, " + hint; d.Limit != 10 || len(lines) != 1 || lines[0].str("err") != want {
		t.Errorf("a plan of a week's window: %+v, log %v; want decided at the limiter's own limit, the error %q logged", d, rec.lines(), want)
	}
}

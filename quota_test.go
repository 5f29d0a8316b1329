package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
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

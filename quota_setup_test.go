package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Setup refuses quotas that cannot be, naming the field, and points a
// window past a day to a quota with a Calendar.

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

package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The headers of a limiter with quotas: every limit listed, and the one
// that refused, or has the fewest left, in X-RateLimit-* and Retry-After.

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

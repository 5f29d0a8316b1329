package storetest

import (
	"math"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The contract, clause by clause, each with the features a store must
// declare for it to run. Windows are a few hundred milliseconds, so that
// a store on a clock of its own steps through them by sleeping; a store
// on Request.Now steps at once.
const w = 300 * time.Millisecond

var cases = []testCase{
	// Fixed windows at a cost of 1, which every store decides (fixed.go).
	{"a fixed window allows exactly its limit at a cost of 1, and refuses the rest until it ends", 0, fixedExact},
	{"a fixed window starts again when it ends", 0, fixedWindowEnds},
	{"tenants count apart", 0, tenantsApart},
	{"concurrent callers get exactly the limit", 0, concurrentExact},
	{"Attach accepts a limiter", 0, attach},

	{"a request is counted only when its cost fits", store.Costs, costFits},
	{"a refused request spends nothing", store.Costs, refusedSpendsNothing},
	{"a read spends nothing and starts no window", store.Costs, readSpendsNothing},
	{"quotas are decided all or nothing with the main limit", store.Costs | store.Quotas | store.Calendars, allOrNothing},
	{"concurrent callers get exactly a quota's limit", store.Quotas, concurrentQuotas},
	{"a sliding window decides by its estimate", store.SlidingWindows, slidingEstimate},
	{"a sliding window weighs the window before", store.SlidingWindows | store.Costs, slidingWeighs},
	{"concurrent callers get exactly a sliding window's limit", store.SlidingWindows, concurrentSliding},
	{"quotas by window slide beside a sliding main limit", store.SlidingWindows | store.Quotas | store.Costs, slidingQuotas},
	{"calendar periods end at the UTC day's and month's ends", store.Calendars, calendarPeriods},
	{"calendar weeks start on Monday, years on 1 January, at 00:00 UTC", store.Calendars, weeksAndYears},
	{"a request that read the clock early is counted in the window a later one opened", store.SlidingWindows | store.Calendars, lateArrival},
	{"a give-back returns the cost in the window it was taken in only", store.GiveBack | store.Costs | store.SlidingWindows, giveBackSameWindow},
	{"a give-back with quotas returns the cost in every limit", store.GiveBack | store.Costs | store.Quotas | store.Calendars, giveBackQuotas},
	{"a read's marks name the windows that run, for a give-back",
		store.GiveBack | store.Costs | store.SlidingWindows | store.Quotas | store.Calendars, giveBackAfterRead},
	{"a give-back takes no count below zero", store.GiveBack | store.Costs, giveBackFloor},
	{"a give-back of a negative cost charges it, past the limit, in the windows it was taken in only",
		store.GiveBack | store.Costs | store.SlidingWindows | store.Quotas | store.Calendars, giveNegativeCharges},
	{"a reset clears a fixed window", store.Resets, resetFixed},
	{"a reset clears a sliding window", store.Resets | store.SlidingWindows, resetSliding},
	{"a reset clears every quota", store.Resets | store.Quotas | store.Calendars, resetQuotas},
	{"a reset frees slots in flight", store.Resets | store.Slots, resetSlots},
	{"slots in flight are freed by a give-back or when their lease ends", store.Slots | store.GiveBack | store.Costs, inFlightLeases},
	{"a token bucket holds its burst, refills at its rate, and a refusal spends nothing", store.TokenBuckets | store.Costs, bucketBurstAndRate},
	{"a token bucket's give-back never fills it past full, and a charge goes past empty, of a bucket not held too",
		store.TokenBuckets | store.GiveBack | store.Costs | store.Resets, bucketGiveAndCharge},
	{"a token bucket reserves a turn within the request's Delay, and later callers queue behind it",
		store.TokenBuckets | store.Reservations | store.Costs, bucketDelay},
	{"a mark that names no window leaves a limit alone, a token bucket too",
		store.TokenBuckets | store.GiveBack | store.Costs | store.Quotas, bucketNoWindow},
}

func costFits(s *subject) {
	r := s.req(tenant(s.t, "cost"), store.FixedWindow, 4, 10, time.Minute)
	s.expect("a cost of 4 of 10", s.take(r), true, 4)
	r.Cost = 7
	a := s.take(r)
	s.expect("a cost of 7 with 6 left", a, false, 4)
	if a.Counts[0].Fits {
		s.t.Errorf("a cost of 7 with 6 left: Fits = true")
	}
	r.Cost = 6
	a = s.take(r)
	s.expect("a cost of 6 with 6 left", a, true, 10)
	if c := a.Counts[0]; c.Left <= 0 || c.Left > c.Length || c.Length < time.Minute {
		s.t.Errorf("a fixed window of a minute reports Left %v of Length %v", c.Left, c.Length)
	}
}

func refusedSpendsNothing(s *subject) {
	r := s.req(tenant(s.t, "refused"), store.FixedWindow, 1, 2, time.Minute)
	s.take(r)
	s.take(r)
	for range 3 {
		s.expect("past the limit", s.take(r), false, 2)
	}
	s.expect("read after the refusals", s.read(r), true, 2)
}

func allOrNothing(s *subject) {
	quotas := []store.Quota{{Name: "q", Limit: 5, Window: time.Minute}, {Name: "month", Limit: 100, Calendar: store.Month}}
	r := s.req(tenant(s.t, "quotas"), store.FixedWindow, 3, 10, time.Minute, quotas...)
	s.expect("3 of 10, 5 and 100", s.take(r), true, 3, 3, 3)
	a := s.take(r)
	s.expect("3 more: past the quota of 5", a, false, 3, 3, 3)
	if !a.Counts[0].Fits || a.Counts[1].Fits || !a.Counts[2].Fits {
		s.t.Errorf("3 more: Fits = %v %v %v, want true false true", a.Counts[0].Fits, a.Counts[1].Fits, a.Counts[2].Fits)
	}
	r.Cost = 2
	s.expect("2 more: fits everywhere", s.take(r), true, 5, 5, 5)
	if c := a.Counts[2]; c.Length < 28*24*time.Hour || c.Length > 31*24*time.Hour || c.Left <= 0 || c.Left > c.Length {
		s.t.Errorf("a month reports Left %v of Length %v", c.Left, c.Length)
	}
}

// slidingDecides checks a sliding window's answer against its own
// estimate: a request allowed leaves it within the limit, one refused did
// not fit.
func slidingDecides(s *subject, what string, a *store.Result, cost, limit int64) {
	s.t.Helper()
	c := a.Counts[0]
	// The previous window weighs by the share of it still inside the
	// last Length: Left of it.
	est := float64(c.Prev)*float64(c.Left)/float64(c.Length) + float64(c.N)
	if a.Allowed && est > float64(limit)+1e-9 || !a.Allowed && est+float64(cost) <= float64(limit) {
		s.t.Errorf("%s: Allowed %v with the estimate %.2f (prev %d, count %d, %v of %v) at a limit of %d and a cost of %d",
			what, a.Allowed, est, c.Prev, c.N, c.Length-c.Left, c.Length, limit, cost)
	}
	if c.Left <= 0 || c.Left > c.Length {
		s.t.Errorf("%s: Left %v of Length %v", what, c.Left, c.Length)
	}
}

func slidingEstimate(s *subject) {
	r := s.req(tenant(s.t, "sliding"), store.SlidingWindow, 1, 5, w)
	allowed := 0
	for i := range 8 {
		a := s.take(r)
		slidingDecides(s, "request "+string(rune('1'+i)), a, 1, 5)
		if a.Allowed {
			allowed++
		}
	}
	// Within one window, or across the boundary of two: at most the limit
	// is allowed in a burst, and some is.
	if allowed == 0 || allowed > 5 {
		s.t.Errorf("%d of 8 allowed at once at a limit of 5", allowed)
	}
}

func slidingWeighs(s *subject) {
	if s.own {
		// Where a window starts is the store's clock's: a case of its own
		// must place requests on it (the RedisCounter's tests do).
		s.t.Skip("the store counts on a clock of its own: slidingEstimate checks its decisions by its own figures")
	}
	// 10 requests; a quarter into the next window, they weigh 75 %: 7.5
	// counted, 2 left of 10.
	r := s.req(tenant(s.t, "weighs"), store.SlidingWindow, 10, 10, time.Second)
	a := s.take(r)
	s.expect("10 at once", a, true, 10)
	end := s.now.Add(a.Counts[0].Left) // where the store's window ends
	s.now = end.Add(time.Second / 4)
	r.Cost = 2
	a = s.take(r)
	s.expect("2 a quarter into the next window", a, true, 2)
	if a.Counts[0].Prev != 10 {
		s.t.Errorf("Prev = %d, want 10", a.Counts[0].Prev)
	}
	r.Cost = 1
	s.expect("1 more", s.take(r), false, 2)
	s.now = end.Add(2 * time.Second)
	r.Cost = 10
	s.expect("10, two windows later", s.take(r), true, 10)
}

// periodsHoldNow checks, on a store whose periods are its server's, that
// it reports for each calendar quota the period that holds now.
func (s *subject) periodsHoldNow(name string, quotas []store.Quota) {
	r := s.req(tenant(s.t, name), store.FixedWindow, 1, 10, time.Minute, quotas...)
	a := s.take(r)
	now := time.Now()
	for j, q := range quotas {
		start, end := q.Calendar.Period(now)
		c := a.Counts[j+1]
		if c.Length != end.Sub(start) || math.Abs(float64(c.Left-end.Sub(now))) > float64(5*time.Second) {
			s.t.Errorf("%s: Left %v of Length %v, want about %v of %v", q.Name, c.Left, c.Length, end.Sub(now), end.Sub(start))
		}
	}
}

func calendarPeriods(s *subject) {
	day := []store.Quota{{Name: "day", Limit: 2, Calendar: store.Day}, {Name: "month", Limit: 3, Calendar: store.Month}}
	if s.own {
		s.periodsHoldNow("calendar", day)
		return
	}
	// A day's last moment, then the next day's first, in a leap year's
	// February: the day starts again, the month runs on to March.
	s.now = time.Date(2028, 2, 28, 23, 59, 59, 900e6, time.UTC)
	r := s.req(tenant(s.t, "calendar"), store.FixedWindow, 1, 10, time.Minute, day...)
	s.expect("Feb 28, 1", s.take(r), true, 1, 1, 1)
	a := s.take(r)
	s.expect("Feb 28, 2", a, true, 2, 2, 2)
	if c := a.Counts[1]; c.Length != 24*time.Hour || c.Left != 100*time.Millisecond {
		s.t.Errorf("the day: Left %v of Length %v, want 100ms of 24h", c.Left, c.Length)
	}
	if c := a.Counts[2]; c.Length != 29*24*time.Hour {
		s.t.Errorf("February 2028: Length %v, want 29 days", c.Length)
	}
	s.expect("Feb 28, 3: the day's quota is spent", s.take(r), false, 2, 2, 2)
	s.advance(200 * time.Millisecond) // Feb 29
	s.expect("Feb 29, 1", s.take(r), true, 3, 1, 3)
	s.expect("Feb 29, 2: the month's quota is spent", s.take(r), false, 3, 1, 3)
	s.now = time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)
	s.expect("Mar 1", s.take(r), true, 1, 1, 1)
}

func weeksAndYears(s *subject) {
	quotas := []store.Quota{{Name: "week", Limit: 2, Calendar: store.Week}, {Name: "year", Limit: 3, Calendar: store.Year}}
	if s.own {
		s.periodsHoldNow("weeks", quotas)
		return
	}
	const day = 24 * time.Hour
	// Sunday 24 December 2028, its last moment: the week ends, the year
	// (a leap year) runs on.
	s.now = time.Date(2028, 12, 24, 23, 59, 59, 900e6, time.UTC)
	r := s.req(tenant(s.t, "weeks"), store.FixedWindow, 1, 10, time.Minute, quotas...)
	s.expect("Sunday, 1", s.take(r), true, 1, 1, 1)
	a := s.take(r)
	s.expect("Sunday, 2", a, true, 2, 2, 2)
	if c := a.Counts[1]; c.Length != 7*day || c.Left != 100*time.Millisecond {
		s.t.Errorf("the week: Left %v of Length %v, want 100ms of 7 days", c.Left, c.Length)
	}
	if c := a.Counts[2]; c.Length != 366*day || c.Left != 7*day+100*time.Millisecond {
		s.t.Errorf("the year 2028: Left %v of Length %v, want 7 days 100ms of 366 days", c.Left, c.Length)
	}
	s.expect("Sunday, 3: the week's quota is spent", s.take(r), false, 2, 2, 2)
	s.advance(200 * time.Millisecond) // Monday 25 December
	s.expect("Monday, 1", s.take(r), true, 3, 1, 3)
	s.expect("Monday, 2: the year's quota is spent", s.take(r), false, 3, 1, 3)
	// Sunday 31 December, the same week: the year's quota is still spent.
	s.now = time.Date(2028, 12, 31, 23, 59, 59, 0, time.UTC)
	s.expect("Sunday 31 December", s.take(r), false, 0, 1, 3)
	// Monday 1 January 2029 starts a week and a year.
	s.now = time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	a = s.take(r)
	s.expect("1 January 2029", a, true, 1, 1, 1)
	if c := a.Counts[2]; c.Length != 365*day || c.Left != 365*day {
		s.t.Errorf("the year 2029: Left %v of Length %v, want all of 365 days", c.Left, c.Length)
	}
	// Monday 31 December 2029 starts a week that the year's end cuts in
	// two: on Tuesday the year starts again, the week runs on.
	s.now = time.Date(2029, 12, 31, 12, 0, 0, 0, time.UTC)
	s.expect("Monday 31 December 2029", s.take(r), true, 1, 1, 2)
	s.now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.expect("Tuesday 1 January 2030", s.take(r), true, 1, 2, 1)
	s.expect("Tuesday, 2: the week's quota is spent", s.take(r), false, 1, 2, 1)
}

func readSpendsNothing(s *subject) {
	r := s.req(tenant(s.t, "read"), store.FixedWindow, 2, 10, w)
	fresh := s.read(r)
	s.expect("a read of a tenant with no window", fresh, true, 0)
	s.advance(w / 2)
	a := s.take(r)
	s.expect("the first take after the read", a, true, 2)
	if a.Counts[0].Left < w-50*time.Millisecond {
		s.t.Errorf("the first take's window has %v left of %v: the read started it", a.Counts[0].Left, w)
	}
	for range 2 {
		s.expect("a read", s.read(r), true, 2)
	}
	s.expect("a take after the reads", s.take(r), true, 4)
}

func slidingQuotas(s *subject) {
	if s.own {
		s.t.Skip("the store counts on a clock of its own: where its windows start is its own (the RedisCounter's tests place requests on it)")
	}
	// 4 counted in the main limit and in a quota of 5 per second; a
	// quarter into the next window, the quota weighs them 75 %: 3
	// counted, 2 left of 5.
	quota := []store.Quota{{Name: "q", Limit: 5, Window: time.Second}}
	r := s.req(tenant(s.t, "sliding-quotas"), store.SlidingWindow, 4, 100, time.Second, quota...)
	a := s.take(r)
	s.expect("4 at once", a, true, 4, 4)
	s.now = s.now.Add(a.Counts[1].Left + time.Second/4)
	r.Cost = 2
	a = s.take(r)
	s.expect("2 a quarter into the next window", a, true, 2, 2)
	if a.Counts[1].Prev != 4 {
		s.t.Errorf("the quota's Prev = %d, want 4", a.Counts[1].Prev)
	}
	r.Cost = 1
	a = s.take(r)
	s.expect("1 more: past the quota", a, false, 2, 2)
	if !a.Counts[0].Fits || a.Counts[1].Fits {
		s.t.Errorf("1 more: Fits = %v %v, want the quota alone to refuse", a.Counts[0].Fits, a.Counts[1].Fits)
	}
}

func lateArrival(s *subject) {
	if s.own {
		s.t.Skip("the store counts on a clock of its own: a request's Now does not place it")
	}
	// Requests read the clock before they reach the store, so that one
	// may arrive after another that read it later. It must not roll a
	// window back and lose what the later one counted.
	day := []store.Quota{{Name: "day", Limit: 100, Calendar: store.Day}}
	early := time.Date(2027, 6, 1, 23, 59, 59, 999e6, time.UTC)
	for _, c := range []struct {
		algo   store.Algorithm
		quotas []store.Quota
		width  time.Duration
	}{
		{store.SlidingWindow, nil, time.Second},
		{store.SlidingWindow, day, time.Second},
		{store.FixedWindow, day, time.Minute},
	} {
		r := s.req(tenant(s.t, "late"), c.algo, 1, 100, c.width, c.quotas...)
		s.now = early
		s.take(r)
		s.now = early.Add(2 * time.Millisecond) // past midnight, in the next window
		after := s.take(r)
		s.now = early.Add(-time.Millisecond) // read before both, arriving last
		late := s.take(r)
		for j := range 1 + len(c.quotas) {
			if late.Counts[j].N < after.Counts[j].N+1 {
				s.t.Errorf("%v with %d quotas: limit %d counted %d after the late request, %d before it: it lost counts",
					c.algo, len(c.quotas), j, late.Counts[j].N, after.Counts[j].N)
			}
		}
	}
}

func inFlightLeases(s *subject) {
	r := s.req(tenant(s.t, "slots"), store.InFlight, 1, 2, w)
	r.Slot = 1
	first := s.take(r)
	s.expect("the first slot", first, true, 1)
	r.Slot = 2
	r.Cost = 1
	s.expect("the second", s.take(r), true, 2)
	r.Slot = 3
	s.expect("a third, at a limit of 2", s.take(r), false, 2)
	r.Slot = 1
	s.give(r, first)
	s.expect("slot 1 given back", s.read(r), true, 1)
	r.Slot = 4
	s.expect("a third, after the give-back", s.take(r), true, 2)
	s.advance(w + 100*time.Millisecond)
	s.expect("a read after the leases ended", s.read(r), true, 0)
	r.Slot, r.Cost = 5, 2
	a := s.take(r)
	s.expect("2 slots after the leases ended", a, true, 2)
	if a.Expired != 2 {
		s.t.Errorf("Expired = %d, want the 2 slots whose lease ended", a.Expired)
	}
}

func concurrentSliding(s *subject) {
	s.exactly("a sliding window", s.req(tenant(s.t, "burst-sliding"), store.SlidingWindow, 1, 50, time.Minute), 200, 50)
}

func concurrentQuotas(s *subject) {
	quotas := []store.Quota{{Name: "q", Limit: 30, Window: time.Minute}}
	s.exactly("a quota", s.req(tenant(s.t, "burst-quotas"), store.FixedWindow, 1, 50, time.Minute, quotas...), 200, 30)
}

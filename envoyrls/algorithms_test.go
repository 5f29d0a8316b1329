package envoyrls_test

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/gatewaykit/ratelimit/envoyrls"
)

// What the reference cannot: calendar periods, several limits on one
// descriptor, a sliding window and a token bucket. These run on a
// MemoryCounter whose clock the test moves (shiftedStore); the Redis
// tests run the same rules on real servers.

const calendarRules = `
domain: cal
descriptors:
  - key: tenant
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: layered
    rate_limit: {unit: second, requests_per_unit: 10}
    limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: day, requests_per_unit: 100}
`

// A MONTH is the calendar month in UTC: it resets at 00:00 UTC on the
// 1st, not 30 days after the epoch's multiple.
func TestMonthResetsOnTheFirst(t *testing.T) {
	st := newShiftedStore()
	_, c := newServer(t, envoyrls.Options{Store: st}, calendarRules)
	st.at(time.Date(2027, 1, 31, 23, 59, 58, 0, time.UTC))
	expectCodes(t, ask(t, c, "cal", desc("tenant", "acme")), "OK OK")
	resp := ask(t, c, "cal", desc("tenant", "acme"))
	expectCodes(t, resp, "OK OK")
	s := resp.Statuses[0]
	if s.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH || s.GetCurrentLimit().GetRequestsPerUnit() != 2 || s.LimitRemaining != 0 {
		t.Fatalf("status %v: want the MONTH limit of 2, none left", s)
	}
	if d := s.GetDurationUntilReset().AsDuration(); d <= 0 || d > 3*time.Second {
		t.Fatalf("duration_until_reset %v at 23:59:58 on 31 January, want about 2s", d)
	}
	expectCodes(t, ask(t, c, "cal", desc("tenant", "acme")), "OVER_LIMIT OVER_LIMIT")
	st.at(time.Date(2027, 2, 1, 0, 0, 0, 500e6, time.UTC))
	expectCodes(t, ask(t, c, "cal", desc("tenant", "acme")), "OK OK")
	expectCodes(t, ask(t, c, "cal", desc("tenant", "acme")), "OK OK")
	resp = ask(t, c, "cal", desc("tenant", "acme"))
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	// February 2027 has 28 days: the period ends at 00:00 on 1 March.
	if d := resp.Statuses[0].GetDurationUntilReset().AsDuration(); d < 27*24*time.Hour || d > 28*24*time.Hour {
		t.Fatalf("duration_until_reset %v early on 1 February 2027, want about 28 days", d)
	}
}

// A WEEK is the ISO week: it starts at 00:00 UTC on Monday.
func TestWeekStartsOnMonday(t *testing.T) {
	st := newShiftedStore()
	_, c := newServer(t, envoyrls.Options{Store: st}, calendarRules)
	st.at(time.Date(2027, 3, 7, 23, 0, 0, 0, time.UTC)) // a Sunday
	expectCodes(t, ask(t, c, "cal", desc("weekly", "w")), "OK OK")
	expectCodes(t, ask(t, c, "cal", desc("weekly", "w")), "OVER_LIMIT OVER_LIMIT")
	st.at(time.Date(2027, 3, 8, 0, 0, 1, 0, time.UTC)) // Monday
	expectCodes(t, ask(t, c, "cal", desc("weekly", "w")), "OK OK")
}

// Several limits on one descriptor are decided all or nothing, and the
// status names the one that refused.
func TestSeveralLimitsOnOneDescriptor(t *testing.T) {
	st := newShiftedStore()
	_, c := newServer(t, envoyrls.Options{Store: st}, calendarRules)
	st.at(time.Date(2027, 5, 3, 12, 0, 0, 0, time.UTC))
	for i := range 3 {
		resp := ask(t, c, "cal", desc("layered", "l"))
		expectCodes(t, resp, "OK OK")
		// The limit with the fewest units left reports: the minute's.
		if l := resp.Statuses[0].GetCurrentLimit(); l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || resp.Statuses[0].LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v, want the MINUTE limit with %d left", i+1, resp.Statuses[0], 2-i)
		}
	}
	resp := ask(t, c, "cal", desc("layered", "l"))
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	if l := resp.Statuses[0].GetCurrentLimit(); l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetRequestsPerUnit() != 3 {
		t.Fatalf("the refusal names %v, want the MINUTE limit of 3", l)
	}
	// The refused request spent nothing in the second's limit or the day's.
	st.advance(time.Minute)
	for range 3 {
		expectCodes(t, ask(t, c, "cal", desc("layered", "l")), "OK OK")
	}
	resp = ask(t, c, "cal", hits(desc("layered", "l"), 0))
	if got := resp.Statuses[0].LimitRemaining; got != 0 {
		t.Fatalf("a read reports %d left of the minute, want 0", got)
	}
}

const windowRules = `
domain: win
descriptors:
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: bucket
    algorithm: token_bucket
    burst: 5
    rate_limit: {unit: second, requests_per_unit: 10}
`

// burst asks n times for one descriptor, and returns how many were OK.
func burst(t *testing.T, c rlsv3.RateLimitServiceClient, domain, key, value string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if ask(t, c, domain, desc(key, value)).OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// A sliding window lets no tenant spend two budgets around a window's
// end: ten requests late in one second leave one for early in the next,
// where a fixed window of the same limit starts afresh.
func TestSlidingWindowAcrossTheWindowsEnd(t *testing.T) {
	st := newShiftedStore()
	_, c := newServer(t, envoyrls.Options{Store: st}, windowRules)
	// The sliding window's seconds are aligned on the store's clock;
	// the fixed window's starts at its first request.
	st.at(time.Date(2027, 6, 1, 12, 0, 0, 900e6, time.UTC))
	if got := burst(t, c, "win", "sliding", "s", 12); got != 10 {
		t.Fatalf("sliding window, late in a second: %d of 12 OK, want 10", got)
	}
	if got := burst(t, c, "win", "fixed", "f", 12); got != 10 {
		t.Fatalf("fixed window: %d of 12 OK, want 10", got)
	}
	st.at(time.Date(2027, 6, 1, 12, 0, 1, 0, time.UTC).Add(100 * time.Millisecond))
	// 90% of the second before still weighs: 9 of 10, so 1 is left.
	if got := burst(t, c, "win", "sliding", "s", 12); got != 1 {
		t.Fatalf("sliding window, early in the next second: %d of 12 OK, want 1", got)
	}
	// The fixed window started at 12:00:00.9 and ended at 12:00:01.9.
	st.advance(900 * time.Millisecond)
	if got := burst(t, c, "win", "fixed", "f", 12); got != 10 {
		t.Fatalf("fixed window, a second after its start: %d of 12 OK, want 10", got)
	}
}

// A token bucket allows its burst at once, then its rate.
func TestTokenBucketBurstThenRate(t *testing.T) {
	st := newShiftedStore()
	_, c := newServer(t, envoyrls.Options{Store: st}, windowRules)
	st.at(time.Date(2027, 6, 1, 12, 0, 0, 0, time.UTC))
	if got := burst(t, c, "win", "bucket", "b", 8); got != 5 {
		t.Fatalf("a full bucket of burst 5: %d of 8 OK, want 5", got)
	}
	// 10 a second: one unit every 100 ms.
	st.advance(300 * time.Millisecond)
	if got := burst(t, c, "win", "bucket", "b", 8); got < 3 || got > 4 {
		t.Fatalf("300 ms later: %d of 8 OK, want 3 (and a 4th, if the test ran 100 ms late)", got)
	}
	resp := ask(t, c, "win", desc("bucket", "b"))
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 10 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("the bucket's status names %v, want 10 per SECOND", l)
	}
}

package ratelimit

import (
	"fmt"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Algorithm is how a limiter counts a tenant's requests in time. It is
// the store package's type, which stores decide by.
type Algorithm = store.Algorithm

const (
	// FixedWindow counts a tenant's requests in windows of Window that
	// start at its first request: the count starts again when a window
	// ends. Its key holds the count, as an integer with an expiry. A
	// tenant can spend its whole budget at the end of one window and again
	// at the start of the next.
	FixedWindow Algorithm = store.FixedWindow

	// SlidingWindow is the sliding-window counter (as Cloudflare's):
	// windows are aligned to multiples of Window on the store's clock (the
	// server's for Redis, so that replicas with skewed clocks agree; the
	// process's for a MemoryCounter), and a request is allowed when the
	// previous window's count, weighted by the share of it still inside
	// the last Window, plus the current window's count, plus the
	// request's cost, is at most the limit. A burst just after a window
	// boundary gets through only in proportion to the time elapsed since
	// the one before it. Its stores must decide it (not a CounterStore).
	SlidingWindow Algorithm = store.SlidingWindow

	// InFlight limits how many requests of a tenant run at once, across
	// every replica that shares the counter: Limit is that number (a cost
	// of n takes n slots), and Window is the lease, the longest a request
	// may hold its slots. A request takes its slots when it is decided and
	// gives them back with Limiter.Release, which the middlewares call
	// when the handler returns, panics included. A slot that is never
	// given back (a replica that died mid-request, a Release that failed)
	// is free again when its lease ends: never lost for good. On Redis a
	// tenant's slots are one sorted set, each slot stamped with the end of
	// its lease on the server's clock, and slots whose lease has ended are
	// dropped by the next request that looks (Metrics counts them as
	// expired). A refusal answers Retry-After: 1, and the headers report
	// the policy in the unit "concurrent-requests". Its stores must decide
	// it (not a CounterStore). It has no Quotas; PlanFor gives a tenant its own number of slots and lease.
	InFlight Algorithm = store.InFlight

	// TokenBucket is a token bucket, as golang.org/x/time/rate has it:
	// Limit per Window is the sustained rate, and Options.Burst (default:
	// Limit) the most a tenant may spend at once after resting. A unit
	// comes back every Window/Limit; a rested tenant holds Burst. It is
	// decided as GCRA: a tenant's key holds one time, when its bucket is
	// full again, on the store's clock (Redis's TIME, in microseconds), so
	// that no replica's clock matters. A refused request writes nothing;
	// a cost above Burst is refused at once, with no RetryAfter, since it
	// never fits. The headers report Limit per Window as the policy,
	// Remaining as the whole units the bucket holds now, and Reset as the
	// time until it is full (docs/algorithms.md works an example). It
	// waits instead of refusing with Limiter.Wait and the middlewares' MaxDelay.
	// A Quota with a Window counts beside it in fixed windows. Its stores
	// must decide it (not a CounterStore).
	TokenBucket Algorithm = store.TokenBucket
)

// The bounds of every limit's Limit and Window (Options, Plan, Quota): Redis counts in Lua numbers, which hold
// integers exactly up to 2^53, and keeps expiries in milliseconds; a
// window past a day is a quota, which a window limiter keeps badly (one
// lost key loses it all).
const (
	maxLimit  = 1 << 53
	minWindow = time.Millisecond
	maxWindow = 24 * time.Hour
)

// windowOutOfBounds says why w cannot be a window (Options.Window, a
// Plan's, a Quota's), or "" when it can. A window past a day is a budget
// per week, month or year, which is what a Quota with a Calendar counts:
// the message says so. It runs for every request with a plan, so a
// window within bounds costs no formatting.
func windowOutOfBounds(w time.Duration) string {
	if w >= minWindow && w <= maxWindow {
		return ""
	}
	why := fmt.Sprintf("Window must be between %v and %v, got %v", minWindow, maxWindow, w)
	if w > maxWindow {
		why += ": for a budget per day, week, month or year, give the limiter a Quota with a Calendar " +
			"(CalendarDay, CalendarWeek, CalendarMonth or CalendarYear) in Options.Quotas or Plan.Quotas"
	}
	return why
}

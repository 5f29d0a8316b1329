package ratelimit

import (
	"math"
	"strconv"
	"time"
)

// Algorithm is how a limiter counts a tenant's requests in time.
type Algorithm int

const (
	// FixedWindow counts a tenant's requests in windows of Window that
	// start at its first request: the count starts again when a window
	// ends. Its key holds the count, as an integer with an expiry. A
	// tenant can spend its whole budget at the end of one window and again
	// at the start of the next.
	FixedWindow Algorithm = iota

	// SlidingWindow is the sliding-window counter (as Cloudflare's):
	// windows are aligned to multiples of Window on the store's clock (the
	// server's for Redis, so that replicas with skewed clocks agree; the
	// process's for a MemoryCounter), and a request is allowed when the
	// previous window's count, weighted by the share of it still inside
	// the last Window, plus the current window's count, plus the
	// request's cost, is at most the limit. A burst just after a window
	// boundary gets through only in proportion to the time elapsed since
	// the one before it. It needs a MemoryCounter or a RedisCounter.
	SlidingWindow

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
	// the policy in the unit "concurrent-requests". It needs Counter (and
	// Fallback) to be a MemoryCounter or a RedisCounter, and has no
	// Quotas; PlanFor gives a tenant its own number of slots and lease.
	InFlight
)

// String returns "fixed window", "sliding window" or "in flight".
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed window"
	case SlidingWindow:
		return "sliding window"
	case InFlight:
		return "in flight"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// sliding is a sliding-window key at one moment: the counts of the
// previous window and of the current one, and how far the current one has
// run. The arithmetic below is the whole algorithm; the Redis script does
// the same in Lua.
type sliding struct {
	prev, cur int64
	elapsed   time.Duration // into the current window, in [0, window)
	window    time.Duration
}

// estimate is the requests counted in the last window: the previous
// window's count weighted by the share of it still inside, plus the
// current window's.
func (s sliding) estimate() float64 {
	return float64(s.prev)*float64(s.window-s.elapsed)/float64(s.window) + float64(s.cur)
}

// fits reports whether a request of cost fits under limit now.
func (s sliding) fits(cost, limit int64) bool {
	return s.estimate()+float64(cost) <= float64(limit)
}

// remaining is what is left under limit now, in whole units.
func (s sliding) remaining(limit int64) int64 {
	return max(int64(math.Floor(float64(limit)-s.estimate())), 0)
}

// after returns the key d later, if nothing is counted meanwhile.
func (s sliding) after(d time.Duration) sliding {
	s.elapsed += d
	switch {
	case s.elapsed < s.window:
		return s
	case s.elapsed < 2*s.window:
		s.prev, s.cur = s.cur, 0
	default:
		s.prev, s.cur = 0, 0
	}
	s.elapsed %= s.window
	return s
}

// until returns how long, if nothing is counted meanwhile, until the
// estimate has fallen to target or below: 0 if it is there now. The
// estimate falls as the previous window's weight does, to the current
// window's count at the end of the current window, and on in the next as
// the current count's weight falls in turn.
func (s sliding) until(target float64) time.Duration {
	if s.estimate() <= target {
		return 0
	}
	if target < 0 {
		target = 0
	}
	w, left := float64(s.window), float64(s.window-s.elapsed)
	if float64(s.cur) <= target {
		// prev × (left - d)/w + cur = target, within this window.
		d := left - (target-float64(s.cur))*w/float64(s.prev)
		return ceilDuration(max(d, 0))
	}
	// Next window: cur × (w - e')/w = target at e' = w - target×w/cur.
	return ceilDuration(left + w - target*w/float64(s.cur))
}

// ceilDuration rounds a duration held as a float up to whole nanoseconds.
func ceilDuration(d float64) time.Duration {
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(d))
}

// resetAndRetry returns what a sliding key reports after a decision: the
// time until one more unit than remaining is available, and, for a
// refused cost, until it would fit.
func (s sliding) resetAndRetry(limit, remaining, cost int64, allowed bool) (reset, retry time.Duration) {
	reset = s.until(float64(limit - remaining - 1))
	if !allowed {
		retry = s.until(float64(limit - cost))
	}
	return reset, retry
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Counter is the store a Limiter counts in. MemoryCounter and
// RedisCounter are the two built in; a Counter of your own is another
// store, counted by Incr, one request at a time, in fixed windows (so
// without costs or SlidingWindow, which need a built-in counter).
//
// Incr bumps the counter for key and returns the count after the increment.
// The first Incr of a key starts its window; the implementation expires the
// key when the window ends, so the Incr after that starts a new window at 1.
// That is what makes the window fixed.
//
// A non-nil error means the store failed and the count is unknown; it never
// means "over the limit". Implementations must be safe for concurrent use.
type Counter interface {
	Incr(ctx context.Context, key string, window time.Duration) (int64, error)
}

// TTLCounter is a Counter that also reports, in the same call, how long the
// key's current window has left. A Limiter uses it for the reset
// figures of its headers, so that they cost no extra round trip. Both
// built-in counters implement it; for a Counter that does not, the headers
// report the full window, an upper bound.
type TTLCounter interface {
	Counter
	IncrTTL(ctx context.Context, key string, window time.Duration) (count int64, ttl time.Duration, err error)
}

// incrTTL is Incr with the time left when c reports it, else the window.
func incrTTL(ctx context.Context, c Counter, key string, window time.Duration) (int64, time.Duration, error) {
	if t, ok := c.(TTLCounter); ok {
		return t.IncrTTL(ctx, key, window)
	}
	n, err := c.Incr(ctx, key, window)
	return n, window, err
}

// A take asks a counter to decide one request: in one atomic step, add
// cost to key unless that takes it past limit, and say what is left. The
// built-in counters decide it in the store, so that a refused request
// spends nothing, and costs and the sliding window are exact across
// replicas. A Counter of your own is asked for Incr, at cost 1 and in fixed
// windows only, and takeByIncr compares.
type take struct {
	key    string // a MemoryCounter is given its key as bytes instead
	cost   int64
	limit  int64
	window time.Duration
	algo   Algorithm
	node   int // key's node, when the counter has several (see nodeCounter)
	// The tenant's quotas, decided together with the main limit: the
	// request is allowed only when it fits in every one (see quota.go).
	quotas *quotaSet

	// The answer.
	allowed       bool
	byTransaction bool                   // counted without a script: a refused cost stays counted (see noscript.go)
	remaining     int64                  // units left after the decision
	reset         time.Duration          // until one more unit than remaining is available
	retry         time.Duration          // when refused: until cost would fit
	slide         sliding                // a sliding window's key after the decision
	q             [maxQuotas]limitAnswer // each quota's answer, as the main limit's above
	refusedBy     uint8                  // the limits the cost did not fit: bit 0 the main one, bit i+1 quota i

	// Giving back (see release.go) and requests in flight (inflight.go).
	// A take with give set gives cost back, in each limit whose window is
	// still the one marks names, or the slots of slot; given is then how
	// much the main limit got back. marks are filled in by every counted
	// take; slot names an in-flight request's slots, and expired is how
	// many slots whose lease had ended its counter dropped on the way.
	give    bool
	slot    uint64
	marks   [maxQuotas + 1]int64
	given   int64
	expired int64
}

// decided fills in t's answer for a fixed window whose count is count
// after the decision, with ttl left.
func (t *take) decided(allowed bool, count int64, ttl time.Duration) {
	t.allowed, t.remaining, t.reset = allowed, max(t.limit-count, 0), ttl
	if !allowed {
		t.retry = ttl
		t.refusedBy = 1
	}
}

// decidedSliding fills in t's answer from a sliding window's key after
// the decision.
func (t *take) decidedSliding(allowed bool, s sliding) {
	t.allowed, t.slide, t.remaining = allowed, s, s.remaining(t.limit)
	t.reset, t.retry = s.resetAndRetry(t.limit, t.remaining, t.cost, allowed)
	if !allowed {
		t.refusedBy = 1
	}
}

// takeByIncr decides t with Incr, for a Counter of your own: the count
// after the increment against the limit. A refused request has been
// counted all the same.
func takeByIncr(ctx context.Context, c Counter, t *take) error {
	n, ttl, err := incrTTL(ctx, c, t.key, t.window)
	if err == nil && n <= 0 {
		err = fmt.Errorf("increment rate limit key %s: counter returned %d", t.key, n)
	}
	if err != nil {
		return err
	}
	// A counter may report a nonsensical ttl; the window is then an upper
	// bound.
	if ttl < 0 {
		ttl = t.window
	}
	t.decided(n <= t.limit, n, ttl)
	return nil
}

// ErrClosed is returned by a counter's Incr after its Close.
var ErrClosed = errors.New("ratelimit: counter is closed")

package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Counter is the shared store behind RateLimitShared.
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
// key's current window has left. RateLimitShared uses it for the reset
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

// ErrClosed is returned by a counter's Incr after its Close.
var ErrClosed = errors.New("ratelimit: counter is closed")

package ratelimit

import (
	"time"

	"github.com/gatewaykit/ratelimit/internal/mono"
)

// clock is the time as the limiter and the parts that keep time for it
// (the breaker, the failure log, the memory counter) read it: the time now,
// for deadlines, and the time since the clock's epoch, for what must not
// move when the wall clock is stepped (the real clock's readings are
// monotonic). The zero value is the real clock; tests inject a fake one
// with newClock.
type clock struct {
	now   func() time.Time // nil: time.Now
	epoch time.Time        // now's first reading; unused by the real clock
}

// newClock returns a clock that reads now, or the real clock for nil.
func newClock(now func() time.Time) clock {
	if now == nil {
		return clock{}
	}
	return clock{now: now, epoch: now()}
}

// Now returns the time now.
func (c clock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// mono returns the time now as read on the monotonic clock alone: the
// wall time at the real clock's epoch plus the time since. It saves Now's
// reading of the wall clock, and is right for windows and deadlines, which
// the monotonic clock times; a calendar period needs Now.
func (c clock) mono() time.Time {
	if c.now == nil {
		return mono.Epoch.Add(mono.Now())
	}
	return c.now()
}

// since returns the time from the clock's epoch to t, a reading of Now.
func (c clock) since(t time.Time) time.Duration {
	if c.now == nil {
		return t.Sub(mono.Epoch)
	}
	return t.Sub(c.epoch)
}

// elapsed returns the time from the clock's epoch to now.
func (c clock) elapsed() time.Duration {
	if c.now == nil {
		return mono.Now()
	}
	return c.now().Sub(c.epoch)
}

// Package fakeclock is a clock for tests that moves only when told to.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told to; it is safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock at midnight UTC on 1 January 2026.
func New() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// At returns a clock at t.
func At(t time.Time) *Clock { return &Clock{now: t} }

// Package timerule is how long a limiter's call to its store may wait. A
// request waits at most StoreTimeout for its counter, whatever the Redis
// client's options and whatever deadline the request already carries: a
// later deadline does not lengthen the wait, an earlier one (or a
// cancellation) ends it sooner. Until the counter has answered or failed
// once, a request may wait up to ConnectFactor × StoreTimeout, since
// connecting (dial, handshake, a cluster's slot map) happens inside the
// first calls. Calls wait on a timer, not on a goroutine of their own, and
// a RedisCounter learns of a refused connection from its dial, so an
// unreachable store fails at once with its real cause. A wait that the
// request's own context ends (canceled, or its deadline before
// StoreTimeout) is the request's doing, not the counter's: OwnFault.
package timerule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// ConnectFactor is how many StoreTimeouts a call may wait before the
// store's first answer.
const ConnectFactor = 10

// Options.StoreTimeout's default and bounds.
const (
	Default = 100 * time.Millisecond
	Min     = time.Millisecond
	Max     = time.Minute
)

// Rule is one limiter's time rule.
type Rule struct {
	Timeout time.Duration
	settled atomic.Bool // the counter has answered or failed once
}

// Budget returns how long a call that starts at now may wait for the
// counter, and when that ends: StoreTimeout, or the connecting allowance,
// cut short by ctx's deadline when that comes sooner.
func (r *Rule) Budget(ctx context.Context, now time.Time) (wait time.Duration, deadline time.Time) {
	wait = r.Timeout
	if !r.settled.Load() {
		wait = ConnectFactor * r.Timeout
	}
	deadline = now.Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		return d.Sub(now), d
	}
	return wait, deadline
}

// Ended records the outcome of a call that could wait for wait. A call
// that timed out gets an error that says what it waited for.
func (r *Rule) Ended(wait time.Duration, err error) error {
	if !r.settled.Load() {
		r.settled.Store(true)
	}
	switch {
	case err == nil || !IsTimeout(err):
		return err
	case wait > r.Timeout:
		return fmt.Errorf("ratelimit: counter did not answer within %v, the %d × StoreTimeout allowed before its first answer (%w)",
			wait, ConnectFactor, err)
	}
	return fmt.Errorf("ratelimit: counter did not answer within StoreTimeout (%v) (%w)", wait, err)
}

// OwnFault reports whether err, the failure of a call that could wait for
// wait, is the request's own doing rather than the counter's: its context
// was canceled, or its deadline ended the wait before StoreTimeout did.
// A deadline that left the counter StoreTimeout or more is the counter's
// failure to answer in time.
func (r *Rule) OwnFault(ctx context.Context, wait time.Duration, err error) bool {
	cerr := ctx.Err()
	if cerr == context.Canceled && errors.Is(err, cerr) {
		return true
	}
	return wait < r.Timeout && (IsTimeout(err) || cerr != nil && errors.Is(err, cerr))
}

// IsTimeout reports whether err is a deadline that passed.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// The time rule. A request waits at most StoreTimeout for its counter,
// whatever the Redis client's options and whatever deadline the request
// already carries: a later deadline does not lengthen the wait, an earlier
// one (or a cancellation) ends it sooner. Until the counter has answered or
// failed once, a request may wait up to connectFactor × StoreTimeout, since
// connecting (dial, handshake, a cluster's slot map) happens inside the
// first calls. Calls wait on a timer, not on a goroutine of their own, and
// a RedisCounter learns of a refused connection from its dial, so an
// unreachable store fails at once with its real cause. A wait that the
// request's own context ends (canceled, or its deadline before
// StoreTimeout) is the request's doing, not the counter's: ErrContextDone.

const connectFactor = 10

// Options.StoreTimeout's default and bounds.
const (
	defaultStoreTimeout = 100 * time.Millisecond
	minStoreTimeout     = time.Millisecond
	maxStoreTimeout     = time.Minute
)

// timeRule is one limiter's time rule.
type timeRule struct {
	timeout time.Duration
	settled atomic.Bool // the counter has answered or failed once
}

// budget returns how long a call that starts at now may wait for the
// counter, and when that ends: StoreTimeout, or the connecting allowance,
// cut short by ctx's deadline when that comes sooner.
func (r *timeRule) budget(ctx context.Context, now time.Time) (wait time.Duration, deadline time.Time) {
	wait = r.timeout
	if !r.settled.Load() {
		wait = connectFactor * r.timeout
	}
	deadline = now.Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		return d.Sub(now), d
	}
	return wait, deadline
}

// ended records the outcome of a call that could wait for wait. A call
// that timed out gets an error that says what it waited for.
func (r *timeRule) ended(wait time.Duration, err error) error {
	if !r.settled.Load() {
		r.settled.Store(true)
	}
	switch {
	case err == nil || !isTimeout(err):
		return err
	case wait > r.timeout:
		return fmt.Errorf("ratelimit: counter did not answer within %v, the %d × StoreTimeout allowed before its first answer (%w)",
			wait, connectFactor, err)
	}
	return fmt.Errorf("ratelimit: counter did not answer within StoreTimeout (%v) (%w)", wait, err)
}

// ErrContextDone is in a Decision's Err when the request's own context
// ended before the counter decided: its client went away (net/http cancels
// r.Context() then), or its deadline passed, while it queued or before
// StoreTimeout. A request whose context is done when the limiter asks the
// counter is not sent, so not counted; one whose context ends while its
// round trip is in flight may have been counted. Either is decided as a
// request that nothing counted (let through, or refused with
// Options.FailClosed), without Options.Fallback, whose count it would
// spend for a client that is gone. It says nothing about the store: it
// moves no circuit breaker, is not logged, and Metrics count it under
// CauseCanceled.
var ErrContextDone = errors.New("ratelimit: the request's context ended before the counter decided")

// ownFault reports whether err, the failure of a call that could wait for
// wait, is the request's own doing rather than the counter's: its context
// was canceled, or its deadline ended the wait before StoreTimeout did.
// A deadline that left the counter StoreTimeout or more is the counter's
// failure to answer in time.
func (r *timeRule) ownFault(ctx context.Context, wait time.Duration, err error) bool {
	cerr := ctx.Err()
	if cerr == context.Canceled && errors.Is(err, cerr) {
		return true
	}
	return wait < r.timeout && (isTimeout(err) || cerr != nil && errors.Is(err, cerr))
}

// call calls op for r under the time rule: r.Deadline is set to when the
// wait ends. A request whose context is already done gets no call.
func (rule *timeRule) call(ctx context.Context, r *Request, op func(context.Context, Request) (Answer, error)) (Answer, error) {
	if err := ctx.Err(); err != nil {
		return Answer{}, fmt.Errorf("%w (%w)", ErrContextDone, err)
	}
	wait, deadline := rule.budget(ctx, r.Now)
	if wait <= 0 {
		// The request's own deadline has passed.
		return Answer{}, fmt.Errorf("%w (%w)", ErrContextDone, context.DeadlineExceeded)
	}
	r.Deadline = deadline
	a, err := op(ctx, *r)
	if err != nil && rule.ownFault(ctx, wait, err) {
		// Not an answer, nor a failure, of the store's.
		return a, fmt.Errorf("%w: %w", ErrContextDone, err)
	}
	return a, rule.ended(wait, err)
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

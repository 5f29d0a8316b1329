package ratelimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/store"
)

// The time rule (internal/timerule): a request waits at most
// StoreTimeout for its counter, ConnectFactor × that before the counter's
// first answer, and a wait that its own context ends is its own doing.

type timeRule = timerule.Rule

const (
	connectFactor       = timerule.ConnectFactor
	defaultStoreTimeout = timerule.Default
	minStoreTimeout     = timerule.Min
	maxStoreTimeout     = timerule.Max
)

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

// callTimed calls op for r under rule, with res for its result (nil for
// an op that gives back): r.Deadline is set to when the wait ends. A
// request whose context is already done gets no call.
func callTimed(ctx context.Context, rule *timeRule, r *request, res *store.Result, op func(context.Context, *store.Request, *store.Result) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w (%w)", ErrContextDone, err)
	}
	wait, deadline := rule.Budget(ctx, r.Now)
	if wait <= 0 {
		// The request's own deadline has passed.
		return fmt.Errorf("%w (%w)", ErrContextDone, context.DeadlineExceeded)
	}
	r.Deadline = deadline
	err := op(ctx, &r.Request, res)
	if err != nil && rule.OwnFault(ctx, wait, err) {
		// Not an answer, nor a failure, of the store's.
		return fmt.Errorf("%w: %w", ErrContextDone, err)
	}
	return rule.Ended(wait, err)
}

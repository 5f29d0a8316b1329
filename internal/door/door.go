// Package door is what the middlewares of the ratelimit package and of
// its fiberv3 module share: how a door learns what its Limiter can do,
// reads a request's tenant, tells a failed response from a successful
// one, and gives back or settles after the handler. A door reads the
// tenant (and the cost) from a request and writes the decision; nothing
// else.
package door

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// Wiring is what a door needs to know of its Limiter, made once by the
// Limiter.
type Wiring struct {
	// CostErr is why the Limiter cannot count a request's cost, or nil.
	CostErr error
	// GiveErr is why it cannot give back what a request took, or nil.
	GiveErr error
	// InFlight: the Limiter counts requests in flight, whose slots every
	// request gives back when its handler returns.
	InFlight bool
	// Local: the Limiter's store never waits, so that a door may give it
	// no request context.
	Local bool
	// Unreadable logs a tenant of a type TenantID cannot read.
	Unreadable func(reflect.Type)

	// DelayErr is why the limiter's requests cannot wait for their turn
	// (MaxDelay), or nil: it is not a TokenBucket, or its
	// store cannot reserve a turn.
	DelayErr error
	// BadCostAfter logs a cost below 0 that a door's CostAfter returned
	// for a request of tenant: the gateway's mistake.
	BadCostAfter func(tenant string, cost int)
}

// CheckDelay returns why a door of a limiter wired by w cannot have
// maxDelay (a door's MaxDelay), or nil.
func (w *Wiring) CheckDelay(maxDelay time.Duration) error {
	switch {
	case maxDelay < 0:
		return fmt.Errorf("MaxDelay must not be negative, got %v", maxDelay)
	case maxDelay > 0 && w.DelayErr != nil:
		return errors.New("MaxDelay: " + w.DelayErr.Error())
	}
	return nil
}

// Check returns why a door cannot run as configured with w's Limiter,
// naming the field, or nil: a cost function (cost) on a Limiter that
// cannot count costs; a function of the cost after the response
// (costAfter) on a Limiter that cannot settle it, an InFlight one (which
// holds slots, not costs) or one that cannot give back or charge; or
// skip rules on a Limiter that cannot give back or on an InFlight one,
// which gives back every request.
func (w *Wiring) Check(cost, costAfter, skipFailed, skipSuccessful bool) error {
	switch {
	case cost && w.CostErr != nil:
		return errors.New("Cost: " + w.CostErr.Error())
	case costAfter && w.InFlight:
		return errors.New("CostAfter: an InFlight limiter holds slots, not costs: " +
			"it gives back every request's slots when its handler returns, and has no cost to settle")
	case costAfter && w.GiveErr != nil:
		return errors.New("CostAfter: settling a cost after the response: " + w.GiveErr.Error())
	}
	field := "SkipFailedRequests"
	switch {
	case !skipFailed && !skipSuccessful:
		return nil
	case !skipFailed:
		field = "SkipSuccessfulRequests"
	}
	switch {
	case w.InFlight:
		return errors.New(field + ": an InFlight limiter gives back every request's slots when its handler returns; " +
			"a skip rule has nothing left to give back")
	case w.GiveErr != nil:
		return errors.New(field + ": " + w.GiveErr.Error())
	}
	return nil
}

// Skipped reports whether a skip rule gives back a request answered with
// status: a failure is 400 or more, a success below.
func Skipped(status int, skipFailed, skipSuccessful bool) bool {
	if status >= 400 {
		return skipFailed
	}
	return skipSuccessful
}

// SettleCost reports whether cost, what a door's CostAfter returned for
// a request of tenant ("" for none), settles it: a cost below 0 is the
// gateway's mistake, logged, and the request keeps the cost it was
// decided with.
func (w *Wiring) SettleCost(tenant string, cost int) bool {
	if cost < 0 {
		w.BadCostAfter(tenant, cost)
		return false
	}
	return true
}

// ReleaseContext is ctx without its cancellation, for giving back after
// the handler: its client may be gone, but the count must still be given
// back. A context that is never done (context.Background, a Fiber
// context's default) is used as it is, without allocating.
func ReleaseContext(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// TenantID returns the tenant ID that v stands for, v being what a request
// carries for its tenant, such as Fiber's c.Locals("tenant"): a string,
// the String of a fmt.Stringer, or an integer in decimal, of a type of its
// own or not (type TenantID int64). nil and "" are no tenant. A value of
// any other type is no tenant either, and w.Unreadable logs its type: it is
// the gateway's mistake, which would otherwise put every such tenant into
// the one budget of requests without a tenant.
func (w *Wiring) TenantID(v any) (string, bool) {
	var id string
	switch t := v.(type) {
	case string:
		id = t
	case nil:
	case interface{ String() string }:
		id = t.String()
	default:
		// Types of the gateway's own: type TenantID int64, say.
		switch rv := reflect.ValueOf(v); rv.Kind() {
		case reflect.String:
			id = rv.String()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			id = strconv.FormatInt(rv.Int(), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			id = strconv.FormatUint(rv.Uint(), 10)
		default:
			w.Unreadable(rv.Type())
		}
	}
	return id, id != ""
}

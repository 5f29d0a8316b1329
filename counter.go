package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Counter is the simplest store: Incr bumps the counter for key and
// returns the count after the increment. The first Incr of a key starts
// its window. The implementation expires the key when the window ends, so
// the Incr after that starts a new window at 1. That makes the window
// fixed.
//
// CounterStore makes a store of a Counter. A non-nil error means the
// store failed and the count is unknown. It never means "over the limit".
// Implementations must be safe for concurrent use.
type Counter interface {
	Incr(ctx context.Context, key string, window time.Duration) (int64, error)
}

// CounterStore returns a store that counts with c's Incr, one request at
// a time, in fixed windows. Each request is counted, then compared with
// the limit, so a refused request stays counted. Anything more (a sliding
// window, InFlight, costs, quotas, giving back, Usage and Reset) needs a
// store that declares it, and NewLimiter says so.
func CounterStore(c Counter) store.Store { return counterStore{c} }

// counterStore is the store of a Counter: fixed windows at cost 1,
// counted by Incr. It declares no feature, so the Limiter refuses the rest
// (features.go).
type counterStore struct{ c Counter }

// Attach declares no feature: fixed windows at a cost of 1 are what Incr
// counts.
func (s counterStore) Attach(*store.Budget, bool) (store.Info, error) { return store.Info{}, nil }

// Take counts r by Incr: the count after the increment against the
// limit. A refused request has been counted all the same. The wait ends
// at r.Deadline, the Counter being given a context that ends then.
func (s counterStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	key := string(r.Key)
	if r.Cost != 1 || r.Algorithm != FixedWindow || r.Quotas != nil {
		// The Limiter refuses these first (features.go): a guard, so that
		// Incr never counts 1 for another cost.
		return fmt.Errorf("increment rate limit key %s: %T counts fixed windows at a cost of 1, by Incr alone", key, s.c)
	}
	if wait := r.Wait(); wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	n, err := s.c.Incr(ctx, key, r.Window)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("increment rate limit key %s: counter returned %d", key, n)
	}
	// The window is an upper bound of what it has left.
	res.Allowed = n <= r.Limit
	res.Counts[0] = store.Count{N: n, Fits: res.Allowed, Left: r.Window, Length: r.Window}
	return nil
}

func (s counterStore) Give(context.Context, *store.Request, store.Marks) error {
	return fmt.Errorf("%T counts by Incr alone, and cannot give back", s.c)
}

func (s counterStore) Reset(context.Context, *store.Request) error {
	return fmt.Errorf("%T counts by Incr alone, and cannot reset a tenant", s.c)
}

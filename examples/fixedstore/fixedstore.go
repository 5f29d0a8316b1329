// Package fixedstore is a store.Store of your own in under 100 lines:
// fixed windows in a map guarded by a mutex. It declares what it decides
// beyond fixed windows at a cost of 1: any cost, reads, and resets. A
// Limiter on it refuses at setup the options that need more.
package fixedstore

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Store counts fixed windows in a map guarded by one mutex, on the
// Limiter's clock (Request.Now). A window starts with the first request
// counted in it. It is safe for concurrent use by multiple goroutines.
type Store struct {
	mu        sync.Mutex
	windows   map[string]window // by Request.Key
	nextSweep time.Time
}

var _ store.Store = (*Store)(nil)

// window is what a key has counted from start until end.
type window struct {
	start, end time.Time
	n          int64
}

// New returns an empty Store.
func New() *Store { return &Store{windows: map[string]window{}} }

// Attach declares store.Costs (any cost, and reads) and store.Resets. It
// is Local: the Limiter calls it directly, with no deadline or breaker.
func (s *Store) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.Costs | store.Resets, Local: true}, nil
}

// Take counts r.Cost in r's window when it fits, and otherwise counts
// nothing. A Cost of 0 reads: it reports the count and starts no window.
func (s *Store) Take(_ context.Context, r *store.Request, res *store.Result) error {
	if r.Algorithm != store.FixedWindow || r.Quotas != nil {
		return errors.New("fixedstore: counts fixed windows only, without quotas")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := r.Now
	if !now.Before(s.nextSweep) { // drop the windows that have ended, once a minute at most
		s.nextSweep = now.Add(time.Minute)
		maps.DeleteFunc(s.windows, func(_ string, w window) bool { return !now.Before(w.end) })
	}
	w := s.windows[string(r.Key)]
	if now.Before(w.start) {
		now = w.start // r read the clock before the request that began w did
	}
	if !now.Before(w.end) {
		w = window{start: now, end: now.Add(r.Window)} // w has ended, or none runs
	}
	fits := w.n+r.Cost <= r.Limit
	if fits && r.Cost > 0 {
		w.n += r.Cost
		s.windows[string(r.Key)] = w // the map keeps a copy of the Key
	}
	res.Allowed = fits || r.Cost == 0
	res.Counts[0] = store.Count{N: w.n, Fits: res.Allowed, Left: w.end.Sub(now),
		Length: w.end.Sub(w.start), Mark: w.start.UnixNano()}
	return nil
}

// Give gives nothing back. The store does not declare store.GiveBack, so
// a Limiter never calls it.
func (s *Store) Give(context.Context, *store.Request, store.Marks) error {
	return errors.New("fixedstore: gives nothing back")
}

// Reset clears r's window.
func (s *Store) Reset(_ context.Context, r *store.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.windows, string(r.Key))
	return nil
}

// Package turns keeps the turns a limiter reserved on its store for a
// token bucket's waiting callers (Limiter.Wait, a door's MaxDelay) and
// has not started yet, per key, so that when the store fails they count
// in the fallback's bucket: they still start at their time, and a
// fallback that did not count them would let as many more through beside
// them. Times are durations since an epoch of the caller's, on its
// monotonic clock.
package turns

import (
	"time"

	"github.com/gatewaykit/ratelimit/internal/keyed"
)

// Table holds the turns of at most a bound of keys (see keyed.Map); a
// key's entry ends with its last turn.
type Table struct{ m *keyed.Map[turns] }

// turns are one key's: the units reserved, the start of the last, and
// their generation, which a fallback that takes them over ends.
type turns struct {
	units int64
	last  time.Duration
	gen   uint64
}

// New returns a table of at most bound keys.
func New(bound int) *Table { return &Table{keyed.New[turns](bound, nil)} }

// Reserve records, at now, a turn of cost units for key that starts at
// start, and returns the generation it is in, for Started.
func (t *Table) Reserve(key []byte, cost int64, now, start time.Duration) uint64 {
	s := t.m.Lock(key)
	defer s.Unlock()
	e, ok := s.Get(key, now)
	if !ok {
		e = s.Put(key, start, now)
	}
	e.units += cost
	e.last = max(e.last, start)
	s.Put(key, e.last, now)
	return e.gen
}

// Started records, at now, that a turn of cost units reserved in
// generation gen has started (or was given up): it is no longer to come,
// unless a fallback has taken it over already.
func (t *Table) Started(key []byte, cost int64, gen uint64, now time.Duration) {
	s := t.m.Lock(key)
	defer s.Unlock()
	if e, ok := s.Get(key, now); ok && e.gen == gen {
		e.units -= cost
	}
}

// TakeOver returns the units of key's turns still to come at now, for the
// fallback to count, which then has them: a later call returns them no
// more.
func (t *Table) TakeOver(key []byte, now time.Duration) int64 {
	s := t.m.Lock(key)
	defer s.Unlock()
	e, ok := s.Get(key, now)
	if !ok || e.units <= 0 {
		return 0
	}
	n := e.units
	e.units, e.gen = 0, e.gen+1
	return n
}

// Package mapstore is a store.Store of your own, as plain as one can
// be: a map guarded by a mutex, in the process's memory. It decides all
// that a Limiter asks of a store (fixed and sliding windows, token
// buckets, requests in flight, quotas by window and by calendar, costs,
// giving back, resetting), and declares it all: store.All. It passes the
// contract in package storetest. A store in a database or another cache
// takes the same steps, with rows or keys for the map and a transaction
// or a script for the mutex.
package mapstore

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Store counts in a map guarded by one mutex. Each call runs whole under
// it, so that a request is counted in all of its limits or in none, and
// two requests at once cannot both take the last unit. It counts on the
// Limiter's clock (Request.Now), as a store that lives in one process
// may. It is safe for concurrent use by multiple goroutines.
type Store struct {
	mu        sync.Mutex
	windows   map[windowKey]window
	slots     map[string][]slot // the requests in flight, by Request.Key
	nextSweep time.Time
}

var _ store.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{windows: map[windowKey]window{}, slots: map[string][]slot{}}
}

// windowKey names the window of one limit (by its name) of one tenant (by
// Request.Key).
type windowKey struct{ key, limit string }

// window is what one limit has counted in the window, or calendar period,
// that it runs. A zero end: no window runs. A token bucket's end is when
// it is full again (its start too, so that the sweep drops it then).
type window struct {
	start, end time.Time
	n          int64
	prev       int64 // a sliding window's previous count
}

// slot is the slots that one request in flight holds until it gives them
// back or its lease ends.
type slot struct {
	id   uint64
	cost int64
	end  time.Time
}

// limit is one limit of a request: the main one or a quota.
type limit struct {
	name     string
	max      int64
	width    time.Duration // 0 for a calendar period
	calendar store.Calendar
	sliding  bool
	burst    int64 // a token bucket's; 0 for a window
}

// limits returns b's limits in the order of Result.Counts and
// store.Marks: the main one, then each quota. A quota with a Window
// counts as the main limit does, sliding or fixed.
func limits(b *store.Budget) []limit {
	sliding := b.Algorithm == store.SlidingWindow
	ls := []limit{{name: b.Name, max: b.Limit, width: b.Window, sliding: sliding}}
	if b.Algorithm == store.TokenBucket {
		ls[0].burst = b.Burst // a quota beside it counts in a fixed window
	}
	for _, q := range b.Quotas {
		ls = append(ls, limit{name: q.Name, max: q.Limit, width: q.Window,
			calendar: q.Calendar, sliding: sliding && q.Calendar == 0})
	}
	return ls
}

// Take decides r: it adds r.Cost to every limit when it fits in all of
// them, and otherwise changes nothing. A Cost of 0 reads. It writes a
// Count for each limit into res.Counts, which the caller made long
// enough.
func (s *Store) Take(_ context.Context, r *store.Request, res *store.Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(r.Now)
	// The map keeps a copy of the Key: r.Key is valid only during the call.
	key := string(r.Key)
	if r.Algorithm == store.InFlight {
		s.takeSlots(key, r, res)
		return nil
	}
	ls := limits(r.Budget)
	now := s.at(key, ls, r.Now)
	res.Allowed = true
	ws := make([]window, len(ls))
	for j, l := range ls {
		ws[j] = l.roll(s.windows[windowKey{key, l.name}], now)
		res.Counts[j] = l.count(ws[j], now)
		res.Counts[j].Fits = r.Cost == 0 || l.fits(res.Counts[j], r.Cost, r.Delay)
		res.Allowed = res.Allowed && res.Counts[j].Fits
	}
	if !res.Allowed || r.Cost == 0 {
		return nil
	}
	for j, l := range ls {
		if l.burst > 0 {
			ws[j] = l.spend(ws[j], now, r.Cost)
		} else {
			if ws[j].end.IsZero() {
				// A fixed window starts with the first request counted in it.
				ws[j].start, ws[j].end = now, now.Add(l.width)
			}
			ws[j].n += r.Cost
		}
		s.windows[windowKey{key, l.name}] = ws[j]
		res.Counts[j] = l.count(ws[j], now)
		res.Counts[j].Fits = true
	}
	return nil
}

// at is the time at which r, whose key is key and limits ls, counts:
// r.Now, or the start of one of its windows if that is later. A Limiter
// reads its clock before it calls the store, so a request may take the
// lock just after one that read the clock later and began a new window;
// counted at its own time, it would roll that window back and lose its
// count.
func (s *Store) at(key string, ls []limit, now time.Time) time.Time {
	for _, l := range ls {
		if w := s.windows[windowKey{key, l.name}]; l.burst == 0 && now.Before(w.start) {
			now = w.start
		}
	}
	return now
}

// roll returns w as it stands at now: moved on to the window or calendar
// period that holds now if its own has ended. It changes nothing in the
// map, so that a read or a refusal leaves no trace.
func (l limit) roll(w window, now time.Time) window {
	switch {
	case l.burst > 0: // a bucket only fills: it rolls into nothing
	case l.calendar != 0:
		if start, end := l.calendar.Period(now); !w.start.Equal(start) {
			w = window{start: start, end: end}
		}
	case l.sliding:
		// Sliding windows are aligned on multiples of their width, so that
		// the one before is known: it ends where this one starts.
		start := now.Truncate(l.width)
		sameWidth := w.end.Sub(w.start) == l.width
		switch {
		case sameWidth && w.start.Equal(start):
		case sameWidth && w.end.Equal(start):
			w = window{start: start, end: start.Add(l.width), prev: w.n}
		default:
			w = window{start: start, end: start.Add(l.width)}
		}
	case !now.Before(w.end):
		w = window{} // a fixed window that has ended runs no more
	}
	return w
}

// count reports w at now as the Limiter reads it: from N, Left, Length and
// Prev it derives a response's remaining, reset and retry.
func (l limit) count(w window, now time.Time) store.Count {
	if l.burst > 0 {
		// A bucket: the units spent, the time until it is full again,
		// the time it takes to fill from empty.
		left, interval := max(w.end.Sub(now), 0), l.interval()
		n := int64(math.Ceil((float64(left) - l.eps()) / interval))
		return store.Count{N: max(n, 0), Left: left, Length: time.Duration(float64(l.burst) * interval)}
	}
	if w.end.IsZero() {
		// No fixed window runs: report the one a request would start.
		return store.Count{Left: l.width, Length: l.width}
	}
	// A window's start names it for Give: the next one of the limit
	// starts later.
	return store.Count{N: w.n, Prev: w.prev, Left: w.end.Sub(now),
		Length: w.end.Sub(w.start), Mark: w.start.UnixNano()}
}

// fits reports whether cost fits in l, whose window stands as c reports,
// for a request that may wait delay for its turn (a bucket's only).
func (l limit) fits(c store.Count, cost int64, delay time.Duration) bool {
	if l.burst > 0 {
		// Full again within the burst's time (and the delay) after it.
		return float64(c.Left)+float64(cost)*l.interval() <= float64(c.Length+delay)+l.eps()
	}
	if l.sliding {
		// The previous window weighs by the share of it still inside the
		// last width: all of it at the start of this one, none at its end.
		estimate := float64(c.Prev)*float64(c.Left)/float64(c.Length) + float64(c.N)
		return estimate+float64(cost) <= float64(l.max)
	}
	return c.N+cost <= l.max
}

// interval is the time, in nanoseconds, one unit of a bucket takes to
// come back; eps what its comparisons allow for rounding.
func (l limit) interval() float64 { return float64(l.width) / float64(l.max) }
func (l limit) eps() float64      { return l.interval()/1e4 + float64(time.Microsecond) }

// spend moves bucket w, at now, cost units later (earlier for a negative
// cost, given back), never before now: a bucket holds no more than full.
func (l limit) spend(w window, now time.Time, cost int64) window {
	end := now
	if w.end.After(now) {
		end = w.end
	}
	if end = end.Add(time.Duration(float64(cost) * l.interval())); end.Before(now) {
		end = now
	}
	return window{start: end, end: end}
}

// takeSlots decides r, an InFlight request of key: r.Limit slots in all,
// r.Cost of them for this request, held for a lease of r.Window.
func (s *Store) takeSlots(key string, r *store.Request, res *store.Result) {
	res.Allowed, res.Expired = true, 0
	used := held(s.slots[key], r.Now)
	if r.Cost > 0 {
		// Slots whose lease has ended are free again: drop them, and say
		// how many. A read leaves them for the next request to count.
		var kept []slot
		for _, sl := range s.slots[key] {
			if r.Now.Before(sl.end) {
				kept = append(kept, sl)
			} else {
				res.Expired += sl.cost
			}
		}
		res.Allowed = used+r.Cost <= r.Limit
		if res.Allowed {
			kept = append(kept, slot{id: r.Slot, cost: r.Cost, end: r.Now.Add(r.Window)})
			used += r.Cost
		}
		s.slots[key] = kept
	}
	res.Counts[0] = store.Count{N: used, Fits: res.Allowed, Left: r.Window, Length: r.Window}
}

// held is how many slots are held at now: those whose lease runs.
func held(slots []slot, now time.Time) int64 {
	var n int64
	for _, sl := range slots {
		if now.Before(sl.end) {
			n += sl.cost
		}
	}
	return n
}

// Give gives back what a Take of r took: r.Cost in each window that is
// still the one marks names (one that has ended is left alone), or the
// slots of r.Slot. A negative r.Cost charges -r.Cost in those windows,
// past the limit if need be (Limiter.Settle at a higher cost).
func (s *Store) Give(_ context.Context, r *store.Request, marks store.Marks) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := string(r.Key)
	if r.Algorithm == store.InFlight {
		slots := s.slots[key]
		for i, sl := range slots {
			if sl.id == r.Slot {
				s.slots[key] = append(slots[:i], slots[i+1:]...)
				break
			}
		}
		return nil
	}
	ls := limits(r.Budget)
	now := s.at(key, ls, r.Now)
	for j, l := range ls {
		k := windowKey{key, l.name}
		w := l.roll(s.windows[k], now)
		if l.burst > 0 {
			if marks[j] != store.NoWindow {
				s.windows[k] = l.spend(w, now, -r.Cost) // a bucket has no windows to end
			}
			continue
		}
		if (w.n > 0 || r.Cost < 0) && l.count(w, now).Mark == marks[j] {
			w.n -= min(w.n, r.Cost) // a charge: min is r.Cost, so w.n grows
			s.windows[k] = w
		}
	}
	return nil
}

// Reset clears every window of r's limits, and its slots in flight.
func (s *Store) Reset(_ context.Context, r *store.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := string(r.Key)
	delete(s.slots, key)
	for _, l := range limits(r.Budget) {
		delete(s.windows, windowKey{key, l.name})
	}
	return nil
}

// Attach accepts every limiter: the store holds no budget of its own,
// since each request brings its Budget. It declares every feature, since
// it decides them all. It lives in the process, so the Limiter calls it
// directly, with no deadline or circuit breaker.
func (s *Store) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Features: store.All, Local: true}, nil
}

// sweep drops, once a minute at most, the windows and slots that count no
// more, so that the maps do not keep every tenant they have ever seen. A
// window is kept one width past its end, since a sliding window's next one
// weighs it; slots whose lease ended over a minute ago go, uncounted in
// Result.Expired.
func (s *Store) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(time.Minute)
	for k, w := range s.windows {
		if !now.Before(w.end.Add(w.end.Sub(w.start))) {
			delete(s.windows, k)
		}
	}
	for key, slots := range s.slots {
		if held(slots, now.Add(-time.Minute)) == 0 {
			delete(s.slots, key)
		}
	}
}

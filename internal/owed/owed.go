// Package owed keeps what a limiter's fallback admitted while its store
// failed, owed to the store, per key: for each limit of the tenant's
// request, the units owed in the store's window that a mark names (see
// ratelimit.Count.Mark), until the limiter charges them, once, when the
// store answers again. Times are durations since an epoch of the
// caller's, on its monotonic clock.
package owed

import (
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/keyed"
	"github.com/gatewaykit/ratelimit/internal/window"
)

// Windows are the store's windows that units are owed in: a mark for
// each limit (window.NoWindow for one they are not owed in), the
// windows' lengths, and when the last of them ends.
type Windows struct {
	Marks [window.MaxLimits]int64
	Lens  [window.MaxLimits]time.Duration
	End   time.Duration
}

// A Debt is what one key owes: the request, R, that the store is to be
// charged with, and for each limit the units owed in the window of
// Windows.Marks.
type Debt[R any] struct {
	Req   R
	Units [window.MaxLimits]int64
	Windows
}

// Next returns the largest amount d owes, and the marks of a charge of
// it: those of the limits that owe it, window.NoWindow for the others;
// 0 when d owes nothing.
func (d *Debt[R]) Next() (units int64, marks [window.MaxLimits]int64) {
	for _, n := range d.Units {
		units = max(units, n)
	}
	for j := range marks {
		marks[j] = window.NoWindow
		if units > 0 && d.Units[j] == units {
			marks[j] = d.Marks[j]
		}
	}
	return units, marks
}

// Paid records that the limits owing units, as Next returned it, owe no
// more.
func (d *Debt[R]) Paid(units int64) {
	for j := range d.Units {
		if d.Units[j] == units {
			d.Units[j] = 0
		}
	}
}

// Table holds the debts of at most a bound of keys (see keyed.Map), each
// until the last of its windows ends. U is what a debt holds for: the
// limits of its request, which a request under others (a tenant whose
// plan changed) replaces.
type Table[R any, U comparable] struct {
	m        *keyed.Map[entry[R, U]]
	held     atomic.Int64
	sweeping atomic.Bool
	next     atomic.Int64 // when the next sweep may start
}

type entry[R any, U comparable] struct {
	under U
	Debt[R]
}

// An Item is a key's debt, taken out of a Table.
type Item[R any, U comparable] struct {
	Key   string
	Under U
	Debt[R]
}

// New returns a table of at most bound keys. changed, unless nil, is told
// of every change in the keys held, and of each live debt dropped to make
// room (evicted), which then goes uncharged.
func New[R any, U comparable](bound int, changed func(held int64, evicted uint64)) *Table[R, U] {
	t := &Table[R, U]{}
	t.m = keyed.New[entry[R, U]](bound, func(held int64, evicted uint64) {
		t.held.Add(held)
		if changed != nil {
			changed(held, evicted)
		}
	})
	return t
}

// Add records cost units owed by key for req (under its limits under),
// at now, in the windows w. A limit whose window is another than the one
// it owed in before owes only in the new one: the old window has ended,
// and a charge into it would be left alone.
func (t *Table[R, U]) Add(key []byte, req R, under U, cost int64, w *Windows, now time.Duration) {
	s := t.m.Lock(key)
	defer s.Unlock()
	e, ok := s.Get(key, now)
	if !ok || e.under != under {
		e = s.Put(key, w.End, now)
		*e = entry[R, U]{under: under, Debt: Debt[R]{Req: req}}
	}
	for j, m := range w.Marks {
		if m == window.NoWindow {
			continue
		}
		if e.Units[j] > 0 && !SameWindow(e.Marks[j], m, w.Lens[j]) {
			e.Units[j] = 0
		}
		e.Units[j] += cost
		e.Marks[j], e.Lens[j] = m, w.Lens[j]
	}
	e.End = max(e.End, w.End)
	s.Put(key, e.End, now)
}

// SameWindow reports whether marks a and b name one window of length: a
// store on a clock of its own marks a window a little differently each
// time it reports it, and the next window is a whole length away.
func SameWindow(a, b int64, length time.Duration) bool {
	d := a - b
	return d < int64(length)/2 && -d < int64(length)/2
}

// Settle takes a give-back of cost units (a negative cost charges more)
// off what key owes, at now, in each limit, never below 0.
func (t *Table[R, U]) Settle(key []byte, cost int64, now time.Duration) {
	s := t.m.Lock(key)
	defer s.Unlock()
	if e, ok := s.Get(key, now); ok {
		for j, n := range e.Units {
			if n > 0 {
				e.Units[j] = max(n-cost, 0)
			}
		}
	}
}

// Forget drops what key owes.
func (t *Table[R, U]) Forget(key []byte) {
	s := t.m.Lock(key)
	s.Delete(key)
	s.Unlock()
}

// Owing reports whether any key owes: one atomic load, for a request to
// check before it reads the clock for Due.
func (t *Table[R, U]) Owing() bool { return t.held.Load() > 0 }

// Due reports, at now, whether a sweep that charges the debts is to
// start: something is owed, no sweep runs, and now is past the time
// Swept set. The caller that it answers true runs the sweep.
func (t *Table[R, U]) Due(now time.Duration) bool {
	return t.held.Load() > 0 && int64(now) >= t.next.Load() && t.sweeping.CompareAndSwap(false, true)
}

// Swept records that a sweep has ended; the next may start at next.
func (t *Table[R, U]) Swept(next time.Duration) {
	t.next.Store(int64(next))
	t.sweeping.Store(false)
}

// Shards is how many shards the table has, for Take.
func (t *Table[R, U]) Shards() int { return t.m.Shards() }

// Take takes the debts of shard i out of the table, those that are live
// at now.
func (t *Table[R, U]) Take(i int, now time.Duration) []Item[R, U] {
	var items []Item[R, U]
	for _, it := range t.m.TakeShard(i, now) {
		items = append(items, Item[R, U]{Key: it.Key, Under: it.V.under, Debt: it.V.Debt})
	}
	return items
}

// PutBack returns what it still owes, to be charged by a later sweep,
// beside what was added meanwhile.
func (t *Table[R, U]) PutBack(it *Item[R, U], now time.Duration) {
	for j, n := range it.Units {
		if n == 0 {
			continue
		}
		w := Windows{End: it.End}
		for i := range w.Marks {
			w.Marks[i] = window.NoWindow
		}
		w.Marks[j], w.Lens[j] = it.Marks[j], it.Lens[j]
		t.Add([]byte(it.Key), it.Req, it.Under, n, &w, now)
	}
}

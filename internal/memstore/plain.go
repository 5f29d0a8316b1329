package memstore

import (
	"fmt"
	"hash/maphash"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// A plain window: the one limit of a tenant without quotas, fixed or
// sliding, in one entry whose count changes by compare-and-swap.

// liveFor reports whether w counts a request at now in windows of width
// by kind. A fixed window keeps the width it began with; a sliding one
// of another width starts afresh.
func (w *entry) liveFor(now, width int64, kind store.Algorithm) bool {
	if now >= w.end {
		return false
	}
	if kind == store.SlidingWindow {
		return w.width == width
	}
	return w.width == 0
}

// Incr adds 1 to key's fixed window of width at now (see Nanos) and
// returns the count after it and the time the window has left: the seed's
// Counter.
func (m *Store) Incr(key []byte, width time.Duration, now int64) (int64, time.Duration, error) {
	if width <= 0 {
		return 0, 0, fmt.Errorf("increment rate limit key %s: window %v is not positive", key, width)
	}
	w, err := m.window(key, int64(width), store.FixedWindow, now)
	if err != nil {
		return 0, 0, err
	}
	return w.count.Add(1), time.Duration(w.end - now), nil
}

// takeWindow decides r, of a plain window.
func (m *Store) takeWindow(r *store.Request, res *store.Result) (err error) {
	err = m.TakeWindow(r.Key, r.Algorithm, r.Cost, r.Limit, r.Window, Nanos(r.Now), &res.Counts[0])
	res.Allowed = res.Counts[0].Fits
	return err
}

// TakeWindow decides a request of cost in key's plain window (of kind
// Fixed or Sliding) of limit per width, at now on the store's clock (see
// Nanos), and writes the window's state after the decision to st: Take's
// short way for the usual request, a tenant without quotas. The count
// changes by compare-and-swap, only when the cost fits. st is written
// field by field, in place: a state returned by value and copied into the
// caller's answer cost the in-memory path a stalled copy a request.
func (m *Store) TakeWindow(key []byte, kind store.Algorithm, cost, limit int64, width time.Duration, now int64, st *store.Count) error {
	w, err := m.window(key, int64(width), kind, now)
	if err != nil {
		return err
	}
	// A call that read the clock before another made this window, and
	// came after it, counts in it, as of its start.
	now = max(now, w.start)
	st.Left, st.Length = time.Duration(w.end-now), time.Duration(w.end-w.start)
	if kind == store.SlidingWindow {
		// A sliding window is marked by its start, a fixed one by its end.
		st.Mark, st.Prev = w.start, w.prev
		s := window.Slide{Prev: w.prev, Elapsed: time.Duration(now - w.start), Length: width}
		for {
			s.Cur = w.count.Load()
			if !s.Fits(cost, limit) {
				st.N = s.Cur
				return nil
			}
			if w.count.CompareAndSwap(s.Cur, s.Cur+cost) {
				st.N, st.Fits = s.Cur+cost, true
				return nil
			}
		}
	}
	st.Mark = w.end
	for {
		n := w.count.Load()
		if n+cost > limit {
			st.N = n
			return nil
		}
		if w.count.CompareAndSwap(n, n+cost) {
			st.N, st.Fits = n+cost, true
			return nil
		}
	}
}

// window returns key's window that counts a request at now, in windows of
// width by kind, made when there is none.
func (m *Store) window(key []byte, width int64, kind store.Algorithm, now int64) (*entry, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if now >= m.sweepAt.Load() {
		m.sweep(now)
	}
	h := maphash.Bytes(seed, key)
	si := shardOf(h) &^ m.shardsOff
	if t := m.shards[si].table.Load(); t != nil {
		// A window is only ever replaced once it has ended, so counting in
		// one that is live at now counts in the right window even if it
		// is replaced a moment later; one dropped to stay within the bound
		// counts the request as if it came before the drop.
		if _, w := t.find(h, key); w != nil && w.liveFor(now, width, kind) {
			return w, nil
		}
	}
	return m.windowLocked(si, h, key, now, width, kind)
}

// windowLocked handles a new key, an ended window, and rebuilding, in
// shard si.
func (m *Store) windowLocked(si, h uint64, key []byte, now, width int64, kind store.Algorithm) (*entry, error) {
	// A sliding window is kept a window past its end, for the next one.
	life := width
	if kind == store.SlidingWindow {
		life = 2 * width
	}
	return m.locked(si, h, key, now, life, func(w *entry, k string) *entry {
		if w != nil && w.liveFor(now, width, kind) {
			return w
		}
		nw := &entry{key: k, hash: h, start: now}
		if kind == store.SlidingWindow {
			nw.width, nw.start = width, window.Start(now, width)
			if w != nil && w.width == width && w.end == nw.start {
				nw.prev = w.count.Load()
			}
		}
		nw.end = window.AddClamped(nw.start, width)
		return nw
	})
}

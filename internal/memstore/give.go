package memstore

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// Give gives back what a Take of r took, r being as Take was given it but
// for Now, and marks the Marks of Take's counts: r.Cost in each limit
// whose window is still the one its mark names at r.Now (a window that
// has ended is left alone, and a bucket is given back whatever its mark
// but NoWindow), or, for an InFlight limit, the slots of r.Slot. A
// negative r.Cost charges -r.Cost in those windows instead, past the
// limit if need be; nothing is charged into a window that has ended or
// one that came after. A window is named exactly, by its end (a fixed
// window), its start (a sliding one) or its period's start (a calendar
// quota). A bucket has no windows: one this store no longer holds is
// full, and a charge puts it in debt, as RedisCounter's does.
func (m *Store) Give(r *store.Request, marks store.Marks) error {
	if m.closed.Load() {
		return ErrClosed
	}
	plain := len(r.Quotas) == 0
	if r.Algorithm == store.TokenBucket && plain && r.Cost < 0 && marks[0] != window.NoWindow {
		now := Nanos(r.Now)
		main := window.Main(r.Budget)
		b := main.Bucket()
		w, err := m.bucket(r.Key, &b, now, micros(now))
		if err == nil {
			giveBucket(w, &main, r.Cost, now)
		}
		return err
	}
	w := m.peek(r.Key)
	if w == nil {
		return nil
	}
	switch k := r.Algorithm; {
	case k == store.InFlight:
		if f := w.flight(); f != nil {
			f.give(r.Slot)
		}
	case !plain:
		if g := w.group(); g != nil {
			g.give(r, &marks)
		}
	case w.group() != nil || w.flight() != nil:
	case k == store.TokenBucket:
		if w.width == bucketMark && marks[0] != window.NoWindow {
			main := window.Main(r.Budget)
			giveBucket(w, &main, r.Cost, Nanos(r.Now))
		}
	case Nanos(r.Now) >= w.end:
		// Ended: a sliding window's count weighs in the next one, which
		// a settlement leaves alone.
	case k == store.SlidingWindow && w.width == int64(r.Window) && w.start == marks[0],
		k == store.FixedWindow && w.width == 0 && w.end == marks[0]:
		giveBack(&w.count, r.Cost)
	}
	return nil
}

// giveBack takes up to cost off count, never below 0; a negative cost
// adds -cost.
func giveBack(count *atomic.Int64, cost int64) {
	if cost < 0 {
		count.Add(-cost)
		return
	}
	for {
		n := count.Load()
		if back := min(n, cost); back <= 0 || count.CompareAndSwap(n, n-back) {
			return
		}
	}
}

// give gives back r's cost (or charges it, when it is negative) in each
// of g's windows that is still the one marks names, the one r was counted
// in: roll has ended the others, which no longer carry their mark.
func (g *group) give(r *store.Request, marks *store.Marks) {
	ls, n := window.Limits(r.Budget)
	wall := r.Now
	now := Nanos(wall)
	g.mu.Lock()
	defer g.mu.Unlock()
	now, wall = g.latest(now, wall)
	if set := setOf(r); g.set != set {
		g.match(&ls, n)
		g.set = set
	}
	for j := range n {
		s := &g.subs[j]
		s.roll(&ls[j], now, wall)
		if s.bucket {
			if marks[j] != window.NoWindow {
				// A charge may put the bucket's full time past the entry's.
				s.count = int64(math.Float64bits(micros(now) + ls[j].Bucket().Give(s.bucketLeft(now), r.Cost)))
				g.keep.Store(max(g.keep.Load(), s.keep()))
			}
			continue
		}
		if (s.count != 0 || r.Cost < 0) && s.mark(&ls[j]) == marks[j] {
			s.count -= min(s.count, r.Cost)
		}
	}
}

// Read fills in res with what r.Key holds of r's limits at r.Now,
// changing nothing (r.Cost is not read): slots whose lease has ended are
// not dropped (the next Take drops and counts them), and a fixed window
// that does not run is reported as the one a request would start, with
// nothing counted.
func (m *Store) Read(r *store.Request, res *store.Result) error {
	if m.closed.Load() {
		return ErrClosed
	}
	ls, n := window.Limits(r.Budget)
	var subs [window.MaxLimits]sub
	for j := range n {
		subs[j] = sub{name: ls[j].Name, cal: ls[j].Calendar}
	}
	wall := r.Now
	now := Nanos(wall)
	if w := m.peek(r.Key); w != nil {
		if g := w.group(); g != nil {
			g.mu.Lock()
			now, wall = g.later(now, wall)
			for j := range n {
				for k := range g.n {
					if g.subs[k].name == ls[j].Name && g.subs[k].cal == ls[j].Calendar {
						subs[j] = g.subs[k]
					}
				}
			}
			g.mu.Unlock()
		} else if f := w.flight(); f != nil {
			if r.Algorithm == store.InFlight {
				subs[0].count = f.live(now)
			}
		} else if r.Algorithm != store.InFlight {
			subs[0] = w.asSub(ls[0].Name, now)
		}
	}
	for j := range n {
		if ls[j].Kind == store.InFlight {
			res.Counts[j] = store.Count{N: subs[j].count, Fits: true, Left: ls[j].Window, Length: ls[j].Window}
			continue
		}
		subs[j].roll(&ls[j], now, wall)
		subs[j].state(&res.Counts[j], &ls[j], now, wall)
		res.Counts[j].Fits = true
	}
	res.Allowed, res.Expired, res.Counted = true, 0, false
	return nil
}

// Reset ends key's window, or its tenant's windows and slots, at once:
// its next request starts afresh.
func (m *Store) Reset(key []byte, at time.Time) error {
	now := Nanos(at)
	h, si, _, err := m.lookup(key, now)
	if err != nil {
		return err
	}
	s := &m.shards[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.table.Load(); t != nil {
		if i, w := t.find(h, key); w != nil {
			// An ended window: the key's next request starts afresh, and
			// the shard's next rebuild drops it.
			t.slots[i].w.Store(&entry{key: w.key, hash: h, start: now, end: now})
		}
	}
	return nil
}

package memstore

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// Give gives back what a call took, with c as Take was given it but for
// Now, and Marks from Take's result: c.Cost in each limit whose window is
// still the one its mark names at c.Now (a window that has ended is left
// alone, and a bucket is given back whatever its mark but NoWindow), or,
// for an InFlight limit, the slots of c.Slot. A negative
// c.Cost charges -c.Cost in those windows instead, past the limit if need
// be; nothing is charged into a window that has ended or one that came
// after. A window is named exactly, by its end (a fixed window), its start
// (a sliding one) or its period's start (a calendar quota). A bucket has
// no windows: one this store no longer holds is full, and a charge puts
// it in debt, as RedisCounter's does.
func (m *Store) Give(key []byte, c *window.Call) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if c.Main.Kind == store.TokenBucket && c.Quotas == nil && c.Cost < 0 && c.Marks[0] != window.NoWindow {
		now := Nanos(c.Now)
		b := c.Main.Bucket()
		w, err := m.bucket(key, &b, now, micros(now))
		if err == nil {
			giveBucket(w, &c.Main, c.Cost, now)
		}
		return err
	}
	w := m.peek(key)
	if w == nil {
		return nil
	}
	switch k := c.Main.Kind; {
	case k == store.InFlight:
		if f := w.flight(); f != nil {
			f.give(c.Slot)
		}
	case c.Quotas != nil:
		if g := w.group(); g != nil {
			g.give(c)
		}
	case w.group() != nil || w.flight() != nil:
	case k == store.TokenBucket:
		if w.width == bucketMark && c.Marks[0] != window.NoWindow {
			giveBucket(w, &c.Main, c.Cost, Nanos(c.Now))
		}
	case Nanos(c.Now) >= w.end:
		// Ended: a sliding window's count weighs in the next one, which
		// a settlement leaves alone.
	case k == store.SlidingWindow && w.width == int64(c.Main.Window) && w.start == c.Marks[0],
		k == store.FixedWindow && w.width == 0 && w.end == c.Marks[0]:
		giveBack(&w.count, c.Cost)
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

// give gives back c's cost (or charges it, when it is negative) in each
// of g's windows that is still the one c was counted in: roll has ended
// the others, which no longer carry their mark.
func (g *group) give(c *window.Call) {
	ls, n := c.Limits()
	wall := c.Now
	now := Nanos(wall)
	g.mu.Lock()
	defer g.mu.Unlock()
	now, wall = g.latest(now, wall)
	if set := setOf(c); g.set != set {
		g.match(&ls, n)
		g.set = set
	}
	for j := range n {
		s := &g.subs[j]
		s.roll(&ls[j], now, wall)
		if s.bucket {
			if c.Marks[j] != window.NoWindow {
				// A charge may put the bucket's full time past the entry's.
				s.count = int64(math.Float64bits(micros(now) + ls[j].Bucket().Give(s.bucketLeft(now), c.Cost)))
				g.keep.Store(max(g.keep.Load(), s.keep()))
			}
			continue
		}
		if (s.count != 0 || c.Cost < 0) && s.mark(&ls[j]) == c.Marks[j] {
			s.count -= min(s.count, c.Cost)
		}
	}
}

// Read fills in r with what key holds of c's limits at c.Now, changing
// nothing: slots whose lease has ended are not dropped (the next Take
// drops and counts them), and a fixed window that does not run is
// reported as the one a request would start, with nothing counted.
func (m *Store) Read(key []byte, c *window.Call, r *window.Result) error {
	if m.closed.Load() {
		return ErrClosed
	}
	ls, n := c.Limits()
	var subs [window.MaxLimits]sub
	for j := range n {
		subs[j] = sub{name: ls[j].Name, cal: ls[j].Calendar}
	}
	wall := c.Now
	now := Nanos(wall)
	if w := m.peek(key); w != nil {
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
			if c.Main.Kind == store.InFlight {
				subs[0].count = f.live(now)
			}
		} else if c.Main.Kind != store.InFlight {
			subs[0] = w.asSub(ls[0].Name, now)
		}
	}
	for j := range n {
		if ls[j].Kind == store.InFlight {
			r.Counts[j] = store.Count{N: subs[j].count, Fits: true, Left: ls[j].Window, Length: ls[j].Window}
			continue
		}
		subs[j].roll(&ls[j], now, wall)
		subs[j].state(&r.Counts[j], &ls[j], now, wall)
		r.Counts[j].Fits = true
	}
	r.Allowed = true
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

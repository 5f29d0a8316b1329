package memstore

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// A tenant with quotas has all its limits in one entry of the table, under
// its key: a group, whose windows change in place under its own lock, so
// that a request is decided against every limit in one step. Its entry is
// marked by width groupMark, so that no plain request counts in it
// (liveFor is false) and the table's rebuilds keep it until the last of
// its windows has ended (keep).

// groupMark is the width of an entry that heads a groupEntry.
const groupMark = -1

type groupEntry struct {
	entry
	group group
}

// group is a tenant's windows, one per limit.
type group struct {
	mu   sync.Mutex
	keep atomic.Int64 // when the entry may be dropped
	n    int
	subs [window.MaxLimits]sub // under mu
	set  *store.Quota          // the quota set subs were last matched to (setOf)

	// The latest time a call brought, on the store's clock and on the
	// wall's: calls read the time before they take the lock, so that one
	// may arrive after another that read it later, and a window never
	// rolls back to it (see latest).
	at     int64
	atWall time.Time
}

// latest returns the later of now (wall, on the wall clock) and the latest
// time a call brought g, and keeps it: a call that read the clock before
// another but takes the lock after it counts in the window the other has
// rolled to, rather than roll it back and lose its counts. It is called
// with g.mu held.
func (g *group) latest(now int64, wall time.Time) (int64, time.Time) {
	g.at, g.atWall = g.later(now, wall)
	return g.at, g.atWall
}

// later is the later of now (wall) and the latest time a call brought g.
// It is called with g.mu held.
func (g *group) later(now int64, wall time.Time) (int64, time.Time) {
	if now < g.at {
		return g.at, g.atWall
	}
	return now, wall
}

// sub is one limit's window in a group. Times are on the store's clock,
// but a calendar period's, which is named by its start in Unix
// nanoseconds so that it follows the wall clock.
type sub struct {
	name       string // the limit's name
	width      int64  // a window's length; 0 for a calendar period
	sliding    bool
	bucket     bool // a token bucket: count holds its TAT's bits (see bucket.go)
	cal        store.Calendar
	start, end int64 // the window running; end 0: none
	period     int64 // the calendar period counted: its start and end, in Unix nanoseconds
	periodEnd  int64
	count      int64
	prev       int64 // a sliding window's previous count
}

// group returns w's group, or nil for another entry.
func (w *entry) group() *group {
	if w.width != groupMark {
		return nil
	}
	return &(*groupEntry)(unsafe.Pointer(w)).group
}

// takeGroup decides r, which has quotas: every limit in one step under
// the tenant's lock. A live entry costs no allocation.
func (m *Store) takeGroup(r *store.Request, res *store.Result) error {
	ls, n := window.Limits(r.Budget)
	// One reading of the clock: the calendar's periods follow its wall
	// time, windows its monotonic time.
	wall := r.Now
	now := Nanos(wall)
	g, err := m.groupOf(r.Key, &ls[0], now)
	if err != nil {
		return err
	}
	g.mu.Lock()
	now, wall = g.latest(now, wall)
	if set := setOf(r); g.set != set {
		g.match(&ls, n)
		g.set = set
	}
	all := true
	for j := range n {
		s, st := &g.subs[j], &res.Counts[j]
		s.roll(&ls[j], now, wall)
		s.state(st, &ls[j], now, wall)
		st.Fits = ls[j].Fits(st, r.Cost)
		if ls[j].Kind == store.TokenBucket && ls[j].Calendar == 0 {
			_, st.Fits = ls[j].Bucket().Take(s.bucketLeft(now), r.Cost, micros(int64(r.Delay)))
		}
		all = all && st.Fits
	}
	if all {
		// The entry lives as long as its last window: a count can only
		// lengthen that.
		keep := g.keep.Load()
		for j := range n {
			s, st := &g.subs[j], &res.Counts[j]
			s.add(&ls[j], r.Cost, r.Delay, now, wall)
			s.state(st, &ls[j], now, wall)
			st.Fits = true
			keep = max(keep, s.keep())
		}
		g.keep.Store(keep)
	}
	g.mu.Unlock()
	res.Allowed = all
	return nil
}

// groupOf returns key's group at now, made when there is none or it has
// ended, for a tenant whose main limit is main.
func (m *Store) groupOf(key []byte, main *window.Limit, now int64) (*group, error) {
	h, i, w, err := m.lookup(key, now)
	if err != nil {
		return nil, err
	}
	if w != nil {
		if g := w.group(); g != nil && now < g.keep.Load() {
			return g, nil
		}
	}
	// The main window's life bounds how long the shard waits to drop
	// ended windows, as a plain window's would; the entry itself is kept
	// as long as any of its windows runs.
	life := int64(main.Window)
	if main.Kind == store.SlidingWindow {
		life *= 2
	}
	var g *group
	_, err = m.locked(i, h, key, now, life, func(old *entry, k string) *entry {
		if old != nil {
			if og := old.group(); og != nil && now < og.keep.Load() {
				g = og // another call made it meanwhile
				return old
			}
		}
		gw := &groupEntry{entry: entry{key: k, hash: h, start: now, end: math.MaxInt64, width: groupMark}}
		g = &gw.group
		// Until its first decision sets it, the entry outlives any
		// rebuild that could come first.
		g.keep.Store(window.AddClamped(now, life))
		if old != nil && old.group() == nil && old.flight() == nil {
			g.subs[0] = old.asSub(main.Name, now)
			g.n = 1
		}
		return &gw.entry
	})
	return g, err
}

// asSub is the plain window w as a group's main window, named name, at
// now: a tenant that gains quotas keeps its count.
func (w *entry) asSub(name string, now int64) sub {
	if now >= w.keep() {
		return sub{name: name}
	}
	s := sub{name: name, start: w.start, end: w.end, count: w.count.Load()}
	if w.width == bucketMark {
		return sub{name: name, bucket: true, count: s.count}
	}
	if w.width != 0 {
		s.width, s.sliding, s.prev = w.width, true, w.prev
	} else if now >= w.end {
		return sub{name: name}
	} else {
		s.width = w.end - w.start
	}
	return s
}

// match arranges g's windows in the order of the limits ls: a limit keeps
// the window of its name, a new one starts without.
func (g *group) match(ls *[window.MaxLimits]window.Limit, n int) {
	same := g.n == n
	for j := 0; same && j < n; j++ {
		same = g.subs[j].name == ls[j].Name && g.subs[j].cal == ls[j].Calendar
	}
	if same {
		return
	}
	var subs [window.MaxLimits]sub
	for j := range n {
		subs[j] = sub{name: ls[j].Name, cal: ls[j].Calendar}
		for k := range g.n {
			if g.subs[k].name == ls[j].Name && g.subs[k].cal == ls[j].Calendar {
				subs[j] = g.subs[k]
			}
		}
	}
	g.subs, g.n = subs, n
}

// sliding reports whether l counts in a sliding window.
func sliding(l *window.Limit) bool { return l.Kind == store.SlidingWindow && l.Calendar == 0 }

// roll brings s to now for its limit l: a window or period that has ended
// gives way to the next, a sliding window's count passing to prev.
func (s *sub) roll(l *window.Limit, now int64, wall time.Time) {
	switch {
	case l.Kind == store.TokenBucket && l.Calendar == 0:
		if !s.bucket {
			*s = sub{name: s.name, cal: s.cal, bucket: true, count: int64(math.Float64bits(micros(now)))}
		}
	case l.Calendar != 0:
		if w := wall.UnixNano(); w < s.period || w >= s.periodEnd {
			start, end := l.Calendar.Period(wall)
			if p := start.UnixNano(); s.period != p {
				s.count = 0
			}
			s.period, s.periodEnd = start.UnixNano(), end.UnixNano()
		}
	case sliding(l):
		w := int64(l.Window)
		ws := window.Start(now, w)
		switch {
		case !s.sliding || s.width != w:
			s.prev, s.count = 0, 0
		case s.start == ws:
			return
		case s.start == ws-w:
			s.prev, s.count = s.count, 0
		default:
			s.prev, s.count = 0, 0
		}
		s.sliding, s.width, s.start, s.end = true, w, ws, ws+w
	default:
		if s.sliding || s.bucket {
			*s = sub{name: s.name, cal: s.cal}
		}
		if s.end != 0 && now >= s.end {
			s.end, s.count = 0, 0
		}
	}
}

// state fills in st, s's window at now for its limit l: its count, how
// long it has to run and how long it is (a fixed window that does not run
// yet: the one a request would start), a sliding window's previous count,
// and its mark.
func (s *sub) state(st *store.Count, l *window.Limit, now int64, wall time.Time) {
	st.N, st.Prev = s.count, 0
	switch {
	case l.Kind == store.TokenBucket && l.Calendar == 0:
		*st = l.Bucket().State(s.bucketLeft(now), true)
	case l.Calendar != 0:
		st.Left, st.Length = time.Duration(s.periodEnd-wall.UnixNano()), time.Duration(s.periodEnd-s.period)
	case sliding(l):
		st.Prev = s.prev
		st.Left, st.Length = time.Duration(s.end-now), l.Window
	case s.end != 0:
		st.Left, st.Length = time.Duration(s.end-now), time.Duration(s.end-s.start)
	default:
		st.Left, st.Length = l.Window, l.Window
	}
	st.Mark = s.mark(l)
}

// add counts cost in s at now; a fixed window that was not running starts;
// a bucket's cost may wait delay for its turn.
func (s *sub) add(l *window.Limit, cost int64, delay time.Duration, now int64, wall time.Time) {
	if s.bucket {
		after, _ := l.Bucket().Take(s.bucketLeft(now), cost, micros(int64(delay)))
		s.count = int64(math.Float64bits(micros(now) + after))
		return
	}
	s.count += cost
	if l.Calendar != 0 {
		s.end = now + (s.periodEnd - wall.UnixNano())
		return
	}
	if !sliding(l) && s.end == 0 {
		s.width, s.start, s.end = int64(l.Window), now, window.AddClamped(now, int64(l.Window))
	}
}

// mark names the window or period s counts in, for Give: a fixed window
// by its end, a sliding one by its start, a calendar period by its start.
func (s *sub) mark(l *window.Limit) int64 {
	switch {
	case l.Calendar != 0:
		return s.period
	case sliding(l):
		return s.start
	case s.bucket:
		return 0 // a bucket has no windows: see window.BucketOf.Give
	}
	return s.end
}

// keep is when s stops mattering: its window's end, a window later for a
// sliding one, or now when it counts nothing.
func (s *sub) keep() int64 {
	switch {
	case s.bucket:
		return window.AddClamped(int64(min(math.Float64frombits(uint64(s.count))*1e3, math.MaxInt64/2)), bucketSlack)
	case s.sliding && (s.count > 0 || s.prev > 0):
		return window.AddClamped(s.end, s.width)
	case s.count > 0:
		return s.end
	}
	return 0
}

package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// memShards is the number of independently locked parts of a MemoryCounter.
// A power of two; a key's shard is the top bits of its hash.
const memShards = 256

// memDefaultMaxKeys is the bound of a MemoryCounter without MaxKeys, the
// zero value's included.
const memDefaultMaxKeys = 1_000_000

// memMinShare is the fewest windows a shard's share of MaxKeys holds: a
// counter bounded below memShards × memMinShare uses fewer shards. Keys
// never spread exactly evenly, and the smaller the shares, the sooner the
// first of them fills.
const memMinShare = 1024

// MemoryCounter is a Counter that lives in the process: the
// zero-dependency default, right for a single replica. Its windows behave
// like RedisCounter's, fixed or sliding (see Algorithm): in a fixed window
// the first request of a key starts the key's window and the count starts
// again once the window is over.
//
// Keys are spread over 256 shards, each an open-addressing hash table whose
// slots are atomic pointers, each beside its key's hash. Incrementing a key
// whose window is live takes no lock and writes nothing but the window's
// count: a few atomic loads to find it, one atomic add to count. A new key
// or a new window takes the shard's lock. Expired windows are dropped by
// rebuilding a shard's table with only its live windows, once the shard has
// gone the longest window it has seen, or when the table fills; the table is
// sized to what is live, so memory is returned as tenants go quiet.
// Rebuilding happens inside Incr, so there is no background goroutine: the
// shards take turns in a ring, each one turn per longest window the counter
// has seen, and whichever call finds turns due rebuilds those of their
// shards that are due. A shard no call lands on so gives its memory back
// too: under any traffic at all, even one call a second on one key, an
// expired window is gone within about the longest window after it ends (two,
// if its shard was busy at its turn), or at the next call if calls are
// further apart than that.
//
// It holds at most MaxKeys windows, one per key: 1,000,000 unless told
// otherwise, which a gateway does not meet in normal use, and a ceiling
// for one whose clients flood it with new keys (tenant IDs they choose,
// or the 2^32 IPv6 /64 prefixes of a routed /32 under AnonymousByIP).
// A new key always gets a window: when its shard has no room, the shard
// drops its windows that have ended and, when that is not room enough,
// its live windows that end soonest, a batch at a time; Evicted counts
// those. See MaxKeys for exactly what is guaranteed. A lookup of a live
// key pays nothing for the bound but one more word read to pick the
// shard; a new key in a full shard pays, once per eighth of the shard's
// share, for a pass over the shard.
//
// The zero value is an empty counter ready to use, like NewMemoryCounter's,
// with the default bound. A MemoryCounter is safe for concurrent use by
// multiple goroutines.
type MemoryCounter struct {
	shards [memShards]memShard
	closed atomic.Bool

	// The bound (see MaxKeys): maxKeys windows (0: memDefaultMaxKeys) in
	// equal shares over the shards in use. shardsOff masks off the bits of
	// a shard index that a counter of fewer shards leaves unused (0: all
	// memShards are used).
	maxKeys   int
	shardsOff uint64
	evicted   atomic.Uint64 // live windows dropped to stay within maxKeys

	// The shards' turns to be rebuilt, in a ring: one every
	// sweepSpan/memShards, so that each has one per sweepSpan.
	sweepAt   atomic.Int64  // when the next turn is due, on the counter's clock
	sweepSpan atomic.Int64  // the longest window any shard has seen
	sweepNext atomic.Uint64 // the ring position of the next turn

	clock clock // the zero value's is the real one; tests inject a fake

	owners keyOwners // the limiters counting in it
}

// memSeed spreads keys over shards and slots. One per process is enough to
// keep clients from choosing keys that crowd one shard.
var memSeed = maphash.MakeSeed()

type memShard struct {
	mu        sync.Mutex // held to change the table or a slot
	table     atomic.Pointer[memTable]
	rebuiltAt int64    // when the table was last rebuilt, on the counter's clock
	span      int64    // the longest window seen: the rebuild period
	_         [96]byte // 128 bytes a shard: no two share a cache line
}

// memTable is a hash table of windows, linear probing, at most half full.
// A slot only ever goes from empty to a window, or from one window of a
// key to the next window of the same key, so a reader that finds a key's
// slot finds it for good in that table.
type memTable struct {
	slots []tableSlot // a power of two of them
	used  int         // slots holding a window; under the shard's lock
}

// tableSlot is one slot of a memTable: its window, and the hash of the
// window's key, set before the window and never changed after (a slot
// only ever holds windows of one key). A lookup compares the hashes of
// the slots it passes in the table's own memory: reading them in the
// windows, which other cores write as they count, cost a cache miss for
// each slot passed.
type tableSlot struct {
	w    atomic.Pointer[memWindow]
	hash uint64
}

// put puts w into the empty slot s.
func (s *tableSlot) put(w *memWindow) {
	s.hash = w.hash
	s.w.Store(w)
}

// memWindow is one key's window. Every field but count is set before the
// window is in a table and never changes; count is bumped without the
// shard's lock. Times are nanoseconds on the counter's clock.
type memWindow struct {
	key        string
	hash       uint64
	start, end int64 // the window counts requests in [start, end)
	count      atomic.Int64

	// A sliding window's length (0 for a fixed window), and the count of
	// the window before it. The struct stays at 64 bytes: with 10,000
	// tenants the windows are most of what a request reads from memory.
	width, prev int64
}

// keep is when w may be dropped: at its end, or a window later for a
// sliding window, whose count the next one weighs in.
func (w *memWindow) keep() int64 {
	if g := w.group(); g != nil {
		return g.keep.Load()
	}
	if f := w.flight(); f != nil {
		return f.keep.Load()
	}
	if w.width != 0 {
		return addClamped(w.end, w.width)
	}
	return w.end
}

// liveFor reports whether w counts a request at now in windows of width
// by algo. A fixed window keeps the width it began with; a sliding one
// of another width starts afresh.
func (w *memWindow) liveFor(now, width int64, algo Algorithm) bool {
	if now >= w.end {
		return false
	}
	if algo == SlidingWindow {
		return w.width == width
	}
	return w.width == 0
}

var (
	_ Counter      = (*MemoryCounter)(nil)
	_ TTLCounter   = (*MemoryCounter)(nil)
	_ ownedCounter = (*MemoryCounter)(nil)
)

func (m *MemoryCounter) keyOwners() *keyOwners { return &m.owners }

// A MemoryOption configures the MemoryCounter that NewMemoryCounter
// returns: MaxKeys. The zero MemoryOption changes nothing.
type MemoryOption struct {
	maxKeys int
}

// MaxKeys bounds a MemoryCounter to n windows, one per key it counts.
// Without it, and in the zero value, the bound is 1,000,000 windows,
// about 120 MB of memory with keys of 20 bytes.
//
// What is guaranteed: the counter never holds more than n windows, ended
// ones included, whatever the keys and however many goroutines call it;
// a new key always gets a window; and a key whose window is not dropped
// counts exactly.
//
// How: n is split into equal shares (within one) over the counter's
// shards: 256 of them from n = 262,144 up, fewer below so that each share
// holds at least 1,024 windows, and one below n = 2,048. A key's shard is
// picked by a hash with a seed of the process's own. When a new key finds
// its shard's share full, the shard drops its windows that have ended and,
// if that frees less than an eighth of the share, drops live windows, those
// that end soonest, until an eighth is free. Freeing a batch makes a pass
// over the shard (time linear in its share) come once per eighth of its
// share of new keys: an insert costs amortised O(1). Hence:
//   - The windows dropped are the soonest-ending of their shard, which is
//     the whole counter below n = 2,048, not always of the whole counter.
//   - The first eviction can come before the counter holds n windows in
//     all, since the key's shard can fill first: for keys spread at random,
//     at about 90 % of n or more, about 95 % at the default. A shard that
//     has just evicted holds about seven eighths of its share.
//   - A window ends when it stops counting requests: a fixed window at its
//     end, a sliding one a window later, since the next window weighs its
//     count. That is the order of "soonest", and a window dropped before
//     then is an eviction (see Evicted).
//
// A count in flight when its window is dropped is counted in that window,
// as if it came just before; the key's next request starts a fresh window,
// with a fresh budget (a sliding one without the window before).
//
// MaxKeys panics if n is less than 1.
func MaxKeys(n int) MemoryOption {
	if n < 1 {
		panic(fmt.Sprintf("ratelimit: MaxKeys must be at least 1, not %d", n))
	}
	return MemoryOption{maxKeys: n}
}

// NewMemoryCounter returns an empty in-memory counter, bounded by MaxKeys
// (default 1,000,000 windows). It starts no goroutine; Close releases its
// memory.
func NewMemoryCounter(opts ...MemoryOption) *MemoryCounter {
	return newMemoryCounter(nil, opts...)
}

// newMemoryCounter is NewMemoryCounter on the clock now (nil: the real
// clock).
func newMemoryCounter(now func() time.Time, opts ...MemoryOption) *MemoryCounter {
	m := &MemoryCounter{clock: newClock(now)}
	for _, o := range opts {
		if o.maxKeys != 0 {
			m.maxKeys = o.maxKeys
		}
	}
	shards := uint64(memShards)
	for shards > 1 && uint64(m.bound())/shards < memMinShare {
		shards /= 2
	}
	m.shardsOff = (memShards - 1) &^ (shards - 1)
	return m
}

// bound is the most windows m holds.
func (m *MemoryCounter) bound() int {
	if m.maxKeys == 0 {
		return memDefaultMaxKeys
	}
	return m.maxKeys
}

// share is the most windows shard i of m holds: the shards' shares, equal
// within one, add up to m's bound.
func (m *MemoryCounter) share(i uint64) int {
	shards := memShards - m.shardsOff // shardsOff is the high bits of memShards-1
	n := m.bound()
	share := n / int(shards)
	if i < uint64(n)%shards {
		share++
	}
	return share
}

// Evicted returns how many windows m has dropped while they were live, to
// stay within MaxKeys: each let its key start a fresh window early, and so
// gave its tenant a fresh budget. Windows dropped after they ended, and
// those that Close drops, are not counted. A count that grows says that
// the bound is too small for the traffic, or that a client floods the
// counter with new keys.
func (m *MemoryCounter) Evicted() uint64 { return m.evicted.Load() }

// Incr bumps the counter for key and returns the count after the increment.
func (m *MemoryCounter) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	n, _, err := m.IncrTTL(ctx, key, window)
	return n, err
}

// IncrTTL is Incr that also returns the time left in key's window. It
// never blocks on anything but a shard's lock, so ctx is not consulted.
func (m *MemoryCounter) IncrTTL(_ context.Context, key string, window time.Duration) (int64, time.Duration, error) {
	if window <= 0 {
		return 0, 0, fmt.Errorf("increment rate limit key %s: window %v is not positive", key, window)
	}
	// A read-only view of key's bytes: incr never writes to it and copies
	// it before a table keeps it.
	return m.incr(unsafe.Slice(unsafe.StringData(key), len(key)), int64(window))
}

// incr is IncrTTL for a key held in a byte slice.
func (m *MemoryCounter) incr(key []byte, window int64) (int64, time.Duration, error) {
	w, now, err := m.window(key, window, FixedWindow)
	if err != nil {
		return 0, 0, err
	}
	return w.count.Add(1), time.Duration(w.end - now), nil
}

// take decides t for key, held in a byte slice, which the limiter builds
// on its stack: comparing string(key) does not allocate, so a live window
// costs no allocation. The count changes by compare-and-swap, only when
// the cost fits.
func (m *MemoryCounter) take(key []byte, t *take) error {
	if t.algo == InFlight {
		return m.takeFlight(key, t)
	}
	w, now, err := m.window(key, int64(t.window), t.algo)
	if err != nil {
		return err
	}
	// The window counted in, for Release: a fixed one by its end, a
	// sliding one by its start.
	t.marks[0] = w.end
	if t.algo == SlidingWindow {
		t.marks[0] = w.start
		s := sliding{prev: w.prev, elapsed: time.Duration(now - w.start), window: t.window}
		for {
			s.cur = w.count.Load()
			if !s.fits(t.cost, t.limit) {
				t.decidedSliding(false, s)
				return nil
			}
			if w.count.CompareAndSwap(s.cur, s.cur+t.cost) {
				s.cur += t.cost
				t.decidedSliding(true, s)
				return nil
			}
		}
	}
	left := time.Duration(w.end - now)
	for {
		c := w.count.Load()
		if c+t.cost > t.limit {
			t.decided(false, c, left)
			return nil
		}
		if w.count.CompareAndSwap(c, c+t.cost) {
			t.decided(true, c+t.cost, left)
			return nil
		}
	}
}

// window returns key's window that counts a request at now, in windows of
// width by algo, made when there is none.
func (m *MemoryCounter) window(key []byte, width int64, algo Algorithm) (*memWindow, int64, error) {
	if m.closed.Load() {
		return nil, 0, ErrClosed
	}
	now := int64(m.clock.elapsed())
	if now >= m.sweepAt.Load() {
		m.sweep(now)
	}
	h := maphash.Bytes(memSeed, key)
	i := memShardOf(h) &^ m.shardsOff
	if t := m.shards[i].table.Load(); t != nil {
		// A window is only ever replaced once it has ended, so counting in
		// one that is live at now counts in the right window even if it is
		// replaced a moment later; one dropped to stay within MaxKeys
		// counts the request as if it came before the drop.
		if _, w := t.find(h, key); w != nil && w.liveFor(now, width, algo) {
			return w, now, nil
		}
	}
	w, err := m.windowLocked(i, h, key, now, width, algo)
	return w, now, err
}

// memShardOf is the shard of a key hash: its top bits, so that the low bits,
// which pick a slot, stay independent of it.
func memShardOf(h uint64) uint64 { return h >> (64 - bits.Len(memShards-1)) }

// find returns the slot of key, or of the empty slot where it would go, and
// the window in it.
func (t *memTable) find(h uint64, key []byte) (int, *memWindow) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		w := s.w.Load()
		if w == nil || (s.hash == h && w.key == string(key)) {
			return int(i), w
		}
	}
}

// windowLocked handles a new key, an ended window, and rebuilding, in
// shard si.
func (m *MemoryCounter) windowLocked(si, h uint64, key []byte, now, width int64, algo Algorithm) (*memWindow, error) {
	// A sliding window is kept a window past its end, for the next one.
	life := width
	if algo == SlidingWindow {
		life = 2 * width
	}
	return m.locked(si, h, key, now, life, func(w *memWindow, k string) *memWindow {
		if w != nil && w.liveFor(now, width, algo) {
			return w
		}
		nw := &memWindow{key: k, hash: h, start: now}
		if algo == SlidingWindow {
			nw.width, nw.start = width, now-now%width
			if w != nil && w.width == width && w.end == nw.start {
				nw.prev = w.count.Load()
			}
		}
		nw.end = addClamped(nw.start, width)
		return nw
	})
}

// locked puts into key's slot of shard si, under the shard's lock, the
// entry that make returns from the entry there (nil for none) and the key
// as the table keeps it; it returns that entry. Returning the old entry
// changes nothing. life is how long the new entry's window lasts, which
// bounds how long the shard waits to drop ended windows.
func (m *MemoryCounter) locked(si, h uint64, key []byte, now, life int64, make func(old *memWindow, key string) *memWindow) (*memWindow, error) {
	s := &m.shards[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if life > s.span {
		s.span = life
		for span := m.sweepSpan.Load(); life > span; span = m.sweepSpan.Load() {
			if m.sweepSpan.CompareAndSwap(span, life) {
				break
			}
		}
	}
	share := m.share(si)
	t := s.table.Load()
	if t == nil || now-s.rebuiltAt >= s.span {
		t = m.rebuild(s, t, now, share)
	}

	i, w := t.find(h, key)
	if w != nil {
		nw := make(w, w.key)
		if nw != w {
			t.slots[i].w.Store(nw)
		}
		return nw, nil
	}
	switch {
	case t.used >= share:
		// Full: free an eighth of the share at once, so that the next
		// eighth of new keys go in without a pass over the shard.
		t = m.rebuild(s, t, now, share-max(share/8, 1))
		i, _ = t.find(h, key)
	case 2*(t.used+1) > len(t.slots):
		t = m.rebuild(s, t, now, share)
		i, _ = t.find(h, key)
	}
	// The table keeps its own copy of the key: callers' bytes are reused
	// (the limiter's buffer, Fiber's request memory).
	t.used++
	nw := make(nil, string(key))
	t.slots[i].put(nw)
	return nw, nil
}

// addClamped is a+b, or the largest time for one past it.
func addClamped(a, b int64) int64 {
	if a+b < a {
		return math.MaxInt64
	}
	return a + b
}

// sweep takes the shards' turns that are due at now, so that a shard no
// call lands on still drops its expired windows. Of the calls that find
// turns due, one claims them all with a compare-and-swap on sweepAt; the
// others go on at once. A shard that is due is rebuilt; one whose lock is
// held is skipped, as whoever holds it is inserting (which rebuilds a due
// table too), closing, or taking its turn, and no call waits behind another
// shard's rebuild.
//
// Under steady traffic a turn comes every sweepSpan/memShards and a call
// rebuilds at most about one shard. The first call after a pause of a
// sweepSpan or more takes every turn: it tries all 256 locks and rebuilds
// every shard that is due, in time proportional to the windows the counter
// holds (about 10 ms for 300,000 of them on a 2-core server), and that one
// call is slower by as much.
func (m *MemoryCounter) sweep(now int64) {
	at, span := m.sweepAt.Load(), m.sweepSpan.Load()
	if now < at || span == 0 {
		return
	}
	step := max(span/memShards, 1)
	turns := (now-at)/step + 1
	next := at + turns*step // turns missed between calls are taken, not lost
	if turns >= memShards {
		turns, next = memShards, now+step
	}
	if !m.sweepAt.CompareAndSwap(at, next) {
		return
	}
	first := m.sweepNext.Add(uint64(turns)) - uint64(turns)
	for i := range uint64(turns) {
		s := &m.shards[(first+i)%memShards]
		if !s.mu.TryLock() {
			continue
		}
		// A table that holds no window is already as small as one gets.
		if t := s.table.Load(); t != nil && t.used > 0 && now-s.rebuiltAt >= s.span {
			m.rebuild(s, t, now, math.MaxInt) // ended windows only
		}
		s.mu.Unlock()
	}
}

// rebuild replaces the table of s, old, with one holding the windows of
// old that are live at now, at most limit of them, with room for one more
// and at most half full. When more than limit are live, it drops those
// that end soonest, and counts them in m.evicted. It is called with s.mu
// held.
func (m *MemoryCounter) rebuild(s *memShard, old *memTable, now int64, limit int) *memTable {
	var live []*memWindow
	if old != nil {
		for i := range old.slots {
			if w := old.slots[i].w.Load(); w != nil && now < w.keep() {
				live = append(live, w)
			}
		}
	}
	if drop := len(live) - limit; drop > 0 {
		soonestFirst(live, drop)
		live = live[drop:]
		m.evicted.Add(uint64(drop))
	}
	size := 8
	for size < 2*(len(live)+1) {
		size *= 2
	}
	t := &memTable{slots: make([]tableSlot, size), used: len(live)}
	mask := uint64(size - 1)
	for _, w := range live { // distinct keys: each takes the first empty slot
		i := w.hash & mask
		for t.slots[i].w.Load() != nil {
			i = (i + 1) & mask
		}
		t.slots[i].put(w)
	}
	s.table.Store(t)
	s.rebuiltAt = now
	return t
}

// soonestFirst reorders ws so that its first k windows end no later than
// any of the others: a quickselect on keep, in time linear in len(ws) on
// average. The pivots are random, so no order of windows makes it slow.
func soonestFirst(ws []*memWindow, k int) {
	lo, hi := 0, len(ws) // the boundary k is within ws[lo:hi]
	for hi-lo > 1 {
		p := ws[lo+rand.IntN(hi-lo)].keep()
		// ws[lo:lt] end before p, ws[lt:gt] at p, ws[gt:hi] after it.
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch e := ws[i].keep(); {
			case e < p:
				ws[lt], ws[i] = ws[i], ws[lt]
				lt, i = lt+1, i+1
			case e > p:
				gt--
				ws[i], ws[gt] = ws[gt], ws[i]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k > gt:
			lo = gt
		default:
			return
		}
	}
}

// Close drops every window and makes later calls return ErrClosed. It is
// safe to call more than once; there is no background work to stop.
func (m *MemoryCounter) Close() error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.table.Store(nil)
		s.mu.Unlock()
	}
	return nil
}

// A tenant with quotas has all its limits in one entry of the table, under
// its main key: a memGroup, whose windows change in place under its own
// lock, so that a request is decided against every limit in one step. Its
// memWindow is marked by width groupMark, so that no plain request counts
// in it (liveFor is false) and the table's rebuilds keep it until the last
// of its windows has ended (keep).

// groupMark is the width of a memWindow that heads a memGroupWindow.
const groupMark = -1

type memGroupWindow struct {
	memWindow
	group memGroup
}

// memGroup is a tenant's windows, one per limit.
type memGroup struct {
	mu   sync.Mutex
	keep atomic.Int64 // when the entry may be dropped, on the counter's clock
	n    int
	subs [maxQuotas + 1]memSub // under mu
	set  *quotaSet             // the quotas subs were last matched to
}

// memSub is one limit's window in a memGroup. Times are on the counter's
// clock, but a calendar period's, which is named by its start in Unix
// nanoseconds so that it follows the wall clock.
type memSub struct {
	name       string // "" for the main limit, else the quota's Name
	width      int64  // a window's length; 0 for a calendar period
	sliding    bool
	cal        Calendar
	start, end int64 // the window running; end 0: none
	period     int64 // the calendar period counted: its start and end, in Unix nanoseconds
	periodEnd  int64
	count      int64
	prev       int64 // a sliding window's previous count
}

// group returns w's memGroup, or nil for a plain window.
func (w *memWindow) group() *memGroup {
	if w.width != groupMark {
		return nil
	}
	return &(*memGroupWindow)(unsafe.Pointer(w)).group
}

// takeGroup decides t, which has quotas, for key: every limit in one step
// under the tenant's lock. A live entry costs no allocation.
func (m *MemoryCounter) takeGroup(key []byte, t *take) error {
	ls, n := t.limits()
	// One reading of the clock: the calendar's periods follow its wall
	// time, windows its monotonic time.
	wall := m.clock.Now()
	now := int64(m.clock.since(wall))
	g, err := m.groupEntry(key, &ls[0], now)
	if err != nil {
		return err
	}
	g.mu.Lock()
	if g.set != t.quotas {
		g.match(&ls, n)
		g.set = t.quotas
	}
	var (
		st   [maxQuotas + 1]limitState
		fits [maxQuotas + 1]bool
		all  = true
	)
	for j := range n {
		s := &g.subs[j]
		s.roll(&ls[j], now, wall)
		s.state(&st[j], &ls[j], now, wall)
		fits[j] = ls[j].fits(&st[j], t.cost)
		all = all && fits[j]
	}
	if all {
		// The entry lives as long as its last window: a count can only
		// lengthen that.
		keep := g.keep.Load()
		for j := range n {
			s := &g.subs[j]
			s.add(&ls[j], t.cost, now, wall)
			st[j].count += t.cost
			keep = max(keep, s.keep())
			t.marks[j] = s.mark(&ls[j])
		}
		g.keep.Store(keep)
	}
	g.mu.Unlock()
	t.decideGroup(&ls, n, &st, &fits)
	return nil
}

// groupEntry returns key's memGroup at now, made when there is none or it
// has ended, for a tenant whose main limit is main.
func (m *MemoryCounter) groupEntry(key []byte, main *groupLimit, now int64) (*memGroup, error) {
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
	life := int64(main.window)
	if main.sliding {
		life *= 2
	}
	var g *memGroup
	_, err = m.locked(i, h, key, now, life, func(old *memWindow, k string) *memWindow {
		if old != nil {
			if og := old.group(); og != nil && now < og.keep.Load() {
				g = og // another call made it meanwhile
				return old
			}
		}
		gw := &memGroupWindow{memWindow: memWindow{key: k, hash: h, start: now, end: math.MaxInt64, width: groupMark}}
		g = &gw.group
		// Until its first decision sets it, the entry outlives any
		// rebuild that could come first.
		g.keep.Store(addClamped(now, life))
		if old != nil && old.group() == nil && old.flight() == nil {
			g.subs[0] = old.asSub(now)
			g.n = 1
		}
		return &gw.memWindow
	})
	return g, err
}

// lookup returns key's hash, its shard and the entry it has there, if
// any, for a request at now; the sweep takes its turns first.
func (m *MemoryCounter) lookup(key []byte, now int64) (h, shard uint64, w *memWindow, err error) {
	if m.closed.Load() {
		return 0, 0, nil, ErrClosed
	}
	if now >= m.sweepAt.Load() {
		m.sweep(now)
	}
	h = maphash.Bytes(memSeed, key)
	shard = memShardOf(h) &^ m.shardsOff
	if t := m.shards[shard].table.Load(); t != nil {
		_, w = t.find(h, key)
	}
	return h, shard, w, nil
}

// asSub is the plain window w as a group's main window at now: a tenant
// that gains quotas keeps its count.
func (w *memWindow) asSub(now int64) memSub {
	if now >= w.keep() {
		return memSub{}
	}
	s := memSub{start: w.start, end: w.end, count: w.count.Load()}
	if w.width != 0 {
		s.width, s.sliding, s.prev = w.width, true, w.prev
	} else if now >= w.end {
		return memSub{}
	} else {
		s.width = w.end - w.start
	}
	return s
}

// match arranges g's windows in the order of the limits ls: a limit keeps
// the window of its name, a new one starts without.
func (g *memGroup) match(ls *[maxQuotas + 1]groupLimit, n int) {
	same := g.n == n
	for j := 0; same && j < n; j++ {
		same = g.subs[j].name == ls[j].name && g.subs[j].cal == ls[j].cal
	}
	if same {
		return
	}
	var subs [maxQuotas + 1]memSub
	for j := range n {
		subs[j] = memSub{name: ls[j].name, cal: ls[j].cal}
		for k := range g.n {
			if g.subs[k].name == ls[j].name && g.subs[k].cal == ls[j].cal {
				subs[j] = g.subs[k]
			}
		}
	}
	g.subs, g.n = subs, n
}

// roll brings s to now for its limit l: a window or period that has ended
// gives way to the next, a sliding window's count passing to prev.
func (s *memSub) roll(l *groupLimit, now int64, wall time.Time) {
	switch {
	case l.cal != 0:
		if w := wall.UnixNano(); w < s.period || w >= s.periodEnd {
			start, end := l.cal.period(wall)
			if p := start.UnixNano(); s.period != p {
				s.count = 0
			}
			s.period, s.periodEnd = start.UnixNano(), end.UnixNano()
		}
	case l.sliding:
		w := int64(l.window)
		ws := now - now%w
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
		if s.sliding {
			*s = memSub{name: s.name}
		}
		if s.end != 0 && now >= s.end {
			s.end, s.count = 0, 0
		}
	}
}

// state fills in st, s's key at now for its limit l, as the counters
// report it.
func (s *memSub) state(st *limitState, l *groupLimit, now int64, wall time.Time) {
	st.count = s.count
	switch {
	case l.cal != 0:
		st.left, st.period = time.Duration(s.periodEnd-wall.UnixNano()), time.Duration(s.periodEnd-s.period)
	case l.sliding:
		st.slide = sliding{prev: s.prev, cur: s.count, elapsed: time.Duration(now - s.start), window: l.window}
	case s.end != 0:
		st.left = time.Duration(s.end - now)
	default:
		st.left = l.window // a window the request would start
	}
}

// add counts cost in s at now; a fixed window that was not running starts.
func (s *memSub) add(l *groupLimit, cost, now int64, wall time.Time) {
	s.count += cost
	if l.cal != 0 {
		s.end = now + (s.periodEnd - wall.UnixNano())
		return
	}
	if !l.sliding && s.end == 0 {
		s.width, s.start, s.end = int64(l.window), now, addClamped(now, int64(l.window))
	}
}

// mark names the window or period s counts in, for Release: a fixed
// window by its end, a sliding one by its start, a calendar period by its
// start.
func (s *memSub) mark(l *groupLimit) int64 {
	switch {
	case l.cal != 0:
		return s.period
	case l.sliding:
		return s.start
	}
	return s.end
}

// keep is when s stops mattering: its window's end, a window later for a
// sliding one, or now when it counts nothing.
func (s *memSub) keep() int64 {
	switch {
	case s.sliding && (s.count > 0 || s.prev > 0):
		return addClamped(s.end, s.width)
	case s.count > 0:
		return s.end
	}
	return 0
}

// Package memstore is the engine of ratelimit.MemoryCounter: a bounded
// table of windows in the process, sharded, whose live windows count
// without a lock. It decides a store.Request under its Key, in bytes, with
// the window package's arithmetic; the ratelimit package's MemoryCounter
// is its public face.
package memstore

import (
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
)

// shards is the number of independently locked parts of a Store. A power
// of two; a key's shard is the top bits of its hash.
const shards = 256

// defaultMaxKeys is the bound of a Store made with 0.
const defaultMaxKeys = 1_000_000

// minShare is the fewest windows a shard's share of the bound holds: a
// store bounded below shards × minShare uses fewer shards. Keys never
// spread exactly evenly, and the smaller the shares, the sooner the first
// of them fills.
const minShare = 1024

// Store is the table. Keys are spread over 256 shards, each an
// open-addressing hash table whose slots are atomic pointers, each beside
// its key's hash. Counting in a key whose window is live takes no lock and
// writes nothing but the window's count: a few atomic loads to find it,
// one atomic add to count. A new key or a new window takes the shard's
// lock. Expired windows are dropped by rebuilding a shard's table with
// only its live windows, once the shard has gone the longest window it
// has seen, or when the table fills; the table is sized to what is live,
// so memory is returned as tenants go quiet. Rebuilding happens inside
// calls, so there is no background goroutine: the shards take turns in a
// ring, each one turn per longest window the store has seen, and
// whichever call finds turns due rebuilds those of their shards that are
// due. See ratelimit.MaxKeys for the bound.
type Store struct {
	shards [shards]shard
	closed atomic.Bool

	// The bound: maxKeys windows in equal shares over the shards in use.
	// shardsOff masks off the bits of a shard index that a store of
	// fewer shards leaves unused (0: all shards are used).
	maxKeys   int
	shardsOff uint64
	evicted   atomic.Uint64 // live windows dropped to stay within maxKeys

	// The shards' turns to be rebuilt, in a ring: one every
	// sweepSpan/shards, so that each has one per sweepSpan.
	sweepAt   atomic.Int64  // when the next turn is due
	sweepSpan atomic.Int64  // the longest window any shard has seen
	sweepNext atomic.Uint64 // the ring position of the next turn
}

// epoch is where a Store's times count from: a UTC midnight a century
// before the process started, so that any time a caller hands it, a test's
// fake one included, is far above 0; windows aligned on multiples of
// their length (a sliding window's) are aligned on the UTC clock as Redis
// aligns them; and a real time, read on the monotonic clock against it,
// never moves when the wall clock is stepped.
var epoch = func() time.Time {
	now := time.Now()
	sinceMidnight := now.Sub(now.Truncate(24 * time.Hour)) // on the wall clock: Truncate drops the monotonic reading
	return now.Add(-sinceMidnight - 100*365*24*time.Hour)
}()

// Nanos is t on a Store's clock: nanoseconds since its epoch, on the
// monotonic clock when t has a reading of it.
func Nanos(t time.Time) int64 { return int64(t.Sub(epoch)) }

// Now is the time now on a Store's clock, read on the monotonic clock
// alone.
func Now() int64 { return int64(time.Since(epoch)) }

// seed spreads keys over shards and slots. One per process is enough to
// keep clients from choosing keys that crowd one shard.
var seed = maphash.MakeSeed()

type shard struct {
	mu        sync.Mutex // held to change the table or a slot
	table     atomic.Pointer[table]
	rebuiltAt int64    // when the table was last rebuilt
	span      int64    // the longest window seen: the rebuild period
	_         [96]byte // 128 bytes a shard: no two share a cache line
}

// table is a hash table of entries, linear probing, at most half full.
// A slot only ever goes from empty to an entry, or from one entry of a
// key to the next of the same key, so a reader that finds a key's slot
// finds it for good in that table.
type table struct {
	slots []tableSlot // a power of two of them
	used  int         // slots holding an entry; under the shard's lock
}

// tableSlot is one slot of a table: its entry, and the hash of the
// entry's key, set before the entry and never changed after (a slot only
// ever holds entries of one key). A lookup compares the hashes of the
// slots it passes in the table's own memory: reading them in the entries,
// which other cores write as they count, cost a cache miss for each slot
// passed.
type tableSlot struct {
	w    atomic.Pointer[entry]
	hash uint64
}

// put puts w into the empty slot s.
func (s *tableSlot) put(w *entry) {
	s.hash = w.hash
	s.w.Store(w)
}

// entry is one key's entry: a plain window (fixed or sliding), or the
// head of a tenant's windows with quotas (group) or of its slots in
// flight (flight), told apart by width. Every field but count is set
// before the entry is in a table and never changes; count is bumped
// without the shard's lock.
type entry struct {
	key        string
	hash       uint64
	start, end int64 // the window counts requests in [start, end)
	count      atomic.Int64

	// A sliding window's length (0 for a fixed window, groupMark or
	// flightMark for the heads), and the count of the window before it.
	// The struct stays at 64 bytes: with 10,000 tenants the windows are
	// most of what a request reads from memory.
	width, prev int64
}

// keep is when w may be dropped: at its end, or a window later for a
// sliding window, whose count the next one weighs in.
func (w *entry) keep() int64 {
	if g := w.group(); g != nil {
		return g.keep.Load()
	}
	if f := w.flight(); f != nil {
		return f.keep.Load()
	}
	if w.width == bucketMark {
		return w.bucketKeep()
	}
	if w.width != 0 {
		return window.AddClamped(w.end, w.width)
	}
	return w.end
}

// Init bounds the empty store m to maxKeys windows (0: defaultMaxKeys,
// the zero value's bound), before its first use.
func (m *Store) Init(maxKeys int) {
	m.maxKeys = maxKeys
	n := uint64(shards)
	for n > 1 && uint64(m.bound())/n < minShare {
		n /= 2
	}
	m.shardsOff = (shards - 1) &^ (n - 1)
}

// bound is the most windows m holds.
func (m *Store) bound() int {
	if m.maxKeys == 0 {
		return defaultMaxKeys
	}
	return m.maxKeys
}

// share is the most windows shard i of m holds: the shards' shares, equal
// within one, add up to m's bound.
func (m *Store) share(i uint64) int {
	n := shards - m.shardsOff // shardsOff is the high bits of shards-1
	b := m.bound()
	share := b / int(n)
	if i < uint64(b)%n {
		share++
	}
	return share
}

// Evicted returns how many windows m has dropped while they were live, to
// stay within its bound.
func (m *Store) Evicted() uint64 { return m.evicted.Load() }

// shardOf is the shard of a key hash: its top bits, so that the low bits,
// which pick a slot, stay independent of it.
func shardOf(h uint64) uint64 { return h >> (64 - bits.Len(shards-1)) }

// lookup returns key's hash, its shard and the entry it has there, if
// any, for a call at now; the sweep takes its turns first.
func (m *Store) lookup(key []byte, now int64) (h, si uint64, w *entry, err error) {
	if m.closed.Load() {
		return 0, 0, nil, ErrClosed
	}
	if now >= m.sweepAt.Load() {
		m.sweep(now)
	}
	h = maphash.Bytes(seed, key)
	si = shardOf(h) &^ m.shardsOff
	if t := m.shards[si].table.Load(); t != nil {
		_, w = t.find(h, key)
	}
	return h, si, w, nil
}

// peek returns key's entry, if any, without sweeping.
func (m *Store) peek(key []byte) *entry {
	h := maphash.Bytes(seed, key)
	if t := m.shards[shardOf(h)&^m.shardsOff].table.Load(); t != nil {
		_, w := t.find(h, key)
		return w
	}
	return nil
}

// find returns the slot of key, or of the empty slot where it would go, and
// the entry in it.
func (t *table) find(h uint64, key []byte) (int, *entry) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		w := s.w.Load()
		if w == nil || (s.hash == h && w.key == string(key)) {
			return int(i), w
		}
	}
}

// locked puts into key's slot of shard si, under the shard's lock, the
// entry that make returns from the entry there (nil for none) and the key
// as the table keeps it; it returns that entry. Returning the old entry
// changes nothing. life is how long the new entry's window lasts, which
// bounds how long the shard waits to drop ended windows.
func (m *Store) locked(si, h uint64, key []byte, now, life int64, make func(old *entry, key string) *entry) (*entry, error) {
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

// sweep takes the shards' turns that are due at now, so that a shard no
// call lands on still drops its expired windows. Of the calls that find
// turns due, one claims them all with a compare-and-swap on sweepAt; the
// others go on at once. A shard that is due is rebuilt; one whose lock is
// held is skipped, as whoever holds it is inserting (which rebuilds a due
// table too), closing, or taking its turn, and no call waits behind another
// shard's rebuild.
//
// Under steady traffic a turn comes every sweepSpan/shards and a call
// rebuilds at most about one shard. The first call after a pause of a
// sweepSpan or more takes every turn: it tries all 256 locks and rebuilds
// every shard that is due, in time proportional to the windows the store
// holds (about 10 ms for 300,000 of them on a 2-core server), and that one
// call is slower by as much.
func (m *Store) sweep(now int64) {
	at, span := m.sweepAt.Load(), m.sweepSpan.Load()
	if now < at || span == 0 {
		return
	}
	step := max(span/shards, 1)
	turns := (now-at)/step + 1
	next := at + turns*step // turns missed between calls are taken, not lost
	if turns >= shards {
		turns, next = shards, now+step
	}
	if !m.sweepAt.CompareAndSwap(at, next) {
		return
	}
	first := m.sweepNext.Add(uint64(turns)) - uint64(turns)
	for i := range uint64(turns) {
		s := &m.shards[(first+i)%shards]
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

// rebuild replaces the table of s, old, with one holding the entries of
// old that are live at now, at most limit of them, with room for one more
// and at most half full. When more than limit are live, it drops those
// that end soonest, and counts them in m.evicted. It is called with s.mu
// held.
func (m *Store) rebuild(s *shard, old *table, now int64, limit int) *table {
	var live []*entry
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
	t := &table{slots: make([]tableSlot, size), used: len(live)}
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

// soonestFirst reorders ws so that its first k entries end no later than
// any of the others: a quickselect on keep, in time linear in len(ws) on
// average. The pivots are random, so no order of entries makes it slow.
func soonestFirst(ws []*entry, k int) {
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
// safe to call more than once.
func (m *Store) Close() {
	if !m.closed.CompareAndSwap(false, true) {
		return
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.table.Store(nil)
		s.mu.Unlock()
	}
}

// Bound is the most windows m holds (see MaxKeys in the root package).
func (m *Store) Bound() int { return m.bound() }

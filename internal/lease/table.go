// Package lease keeps the blocks of budget that a replica claimed from
// its store for its hot tenants, and decides their requests from them
// without asking the store. A block is counted in the store when it is
// claimed, in every limit of the request, so that the replicas together
// never admit more than the limits allow; this package only spends it,
// in the window (or, for a token bucket, the span of arrival times) it
// was counted in, and says what is left to give back or has expired.
// Times are nanoseconds on the caller's clock; the store's windows are
// known only by the time they had left when it answered.
package lease

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Tick is the gate's period: a key is hot once HotUnits of its cost
	// come within one tick on this replica (800 a second).
	Tick     = 10 * time.Millisecond
	HotUnits = 8

	// Horizon is how long a block should last at the tenant's rate on
	// this replica: the longer, the fewer claims, and the more a replica
	// holds that the others may not spend. A block is also at most a
	// sixteenth of its shortest window, and a quarter of what the store
	// last said was left.
	Horizon = 20 * time.Millisecond

	// IdleAfter is how long a block may go unspent before what is left
	// of it is given back to the store (see Entry.Idle).
	IdleAfter = 50 * time.Millisecond

	// MaxKeys is how many hot keys a table holds at most; a key that
	// finds the table full is decided by the store, as a cold one.
	MaxKeys = 4096

	gateSlots = 4096
	shards    = 16
	tickBits  = 24 // the gate keeps a tick's number in its top bits
)

// Table holds the hot keys' entries, R being what the caller keeps of a
// key's last claim (its request, to give back with).
type Table[R any] struct {
	seed   maphash.Seed
	gate   [gateSlots]atomic.Uint64 // per hash of a key: tick<<(64-tickBits) | units
	shards [shards]shard[R]
	ids    atomic.Uint64 // names the blocks

	// Expired, when not nil, is told of units that blocks held when
	// their windows ended: what the replica claimed and never spent.
	Expired func(units int64)
}

type shard[R any] struct {
	mu sync.RWMutex
	m  map[string]*Entry[R]
	_  [40]byte // keeps shards off each other's cache lines
}

// NewTable returns an empty table.
func NewTable[R any]() *Table[R] {
	t := &Table[R]{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*Entry[R])
	}
	return t
}

// Lookup returns key's entry, or nil when key is not hot.
func (t *Table[R]) Lookup(key []byte) *Entry[R] {
	return t.lookup(key, maphash.Bytes(t.seed, key))
}

func (t *Table[R]) lookup(key []byte, h uint64) *Entry[R] {
	s := &t.shards[h%shards]
	s.mu.RLock()
	e := s.m[string(key)]
	s.mu.RUnlock()
	return e
}

// Hot returns key's entry once key is hot on this replica, counting a
// request of cost at now toward it; nil while it is cold, whose requests
// the store decides one by one. The gate is lossy: keys that share a slot
// add up, which at worst makes an entry for a key that then measures its
// own rate.
func (t *Table[R]) Hot(key []byte, cost, now int64) *Entry[R] {
	h := maphash.Bytes(t.seed, key)
	if e := t.lookup(key, h); e != nil {
		return e
	}
	slot := &t.gate[(h>>32)%gateSlots]
	tick := uint64(now/int64(Tick)) & (1<<tickBits - 1)
	const unitBits = 64 - tickBits
	units := uint64(min(cost, 1<<unitBits-1))
	if v := slot.Load(); v>>unitBits == tick {
		units = min(units+v&(1<<unitBits-1), 1<<unitBits-1)
	}
	slot.Store(tick<<unitBits | units)
	if units < HotUnits {
		return nil
	}
	return t.add(key, h, now)
}

// add returns key's entry, made now, or nil when the table is full of
// keys spent in the last second.
func (t *Table[R]) add(key []byte, h uint64, now int64) *Entry[R] {
	s := &t.shards[h%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[string(key)]; e != nil {
		return e
	}
	if len(s.m) >= MaxKeys/shards {
		for k, e := range s.m {
			if e.stale(now) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= MaxKeys/shards {
			return nil
		}
	}
	e := &Entry[R]{t: t, key: string(key)}
	e.rate.start(now)
	s.m[e.key] = e
	return e
}

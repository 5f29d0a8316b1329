// Package keyed is a map of keys to entries that end, bounded in size:
// the limiter's over-limit cache and its memory of each tenant's usage
// for the fallback hold theirs in one. Times are durations since an epoch
// of the caller's, on its monotonic clock.
package keyed

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

const (
	maxShards = 64   // at most, for a bound of 65,536 keys or more
	minShare  = 1024 // keys a shard holds at least, but below 2,048 in all
)

// Map holds at most a bound of keys, each with an entry of type V and the
// time it ends, in shards under mutexes. The bound is split in shares over
// the shards, and a new key that finds its shard's share full first drops
// the entries that have ended, then, if that frees less than an eighth of
// the share, the live entries that end soonest, until an eighth is free.
type Map[V any] struct {
	seed   maphash.Seed
	shards []Shard[V]
}

// Shard is the part of a Map that holds a key, locked by Map.Lock.
type Shard[V any] struct {
	mu      sync.Mutex
	share   int // the most keys it holds
	m       map[string]*entry[V]
	changed func(held int64, evicted uint64)
	_       [64]byte // keeps shards off each other's cache lines
}

type entry[V any] struct {
	end time.Duration // when it is dropped
	v   V
}

// New returns a map of at most bound keys. changed, unless nil, is told
// of every change in the keys held (held, more or fewer), and of each live
// entry dropped to make room (evicted).
func New[V any](bound int, changed func(held int64, evicted uint64)) *Map[V] {
	n := 1
	for n < maxShards && bound/(2*n) >= minShare {
		n *= 2
	}
	m := &Map[V]{seed: maphash.MakeSeed(), shards: make([]Shard[V], n)}
	for i := range m.shards {
		m.shards[i].share, m.shards[i].changed = bound/n, changed
		if i < bound%n {
			m.shards[i].share++
		}
	}
	return m
}

// Lock locks and returns key's shard; the caller unlocks it.
func (m *Map[V]) Lock(key []byte) *Shard[V] {
	s := &m.shards[maphash.Bytes(m.seed, key)%uint64(len(m.shards))]
	s.mu.Lock()
	return s
}

// Unlock unlocks s.
func (s *Shard[V]) Unlock() { s.mu.Unlock() }

// Len is how many keys m holds, ended ones included.
func (m *Map[V]) Len() (n int) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Shards is how many shards m has, for TakeShard.
func (m *Map[V]) Shards() int { return len(m.shards) }

// An Item is a key and its entry, taken out of a Map.
type Item[V any] struct {
	Key string
	End time.Duration
	V   V
}

// TakeShard takes every entry of shard i out of m and returns those that
// have not ended at now.
func (m *Map[V]) TakeShard(i int, now time.Duration) []Item[V] {
	s := &m.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	items := make([]Item[V], 0, len(s.m))
	for k, e := range s.m {
		if now < e.end {
			items = append(items, Item[V]{k, e.end, e.v})
		}
	}
	s.count(-int64(len(s.m)), 0)
	clear(s.m)
	return items
}

// Get returns key's entry, which the caller may change while s is locked,
// unless it has ended at now: it is dropped then.
func (s *Shard[V]) Get(key []byte, now time.Duration) (*V, bool) {
	e, ok := s.m[string(key)]
	if !ok {
		return nil, false
	}
	if now >= e.end {
		s.Delete(key)
		return nil, false
	}
	return &e.v, true
}

// Put returns key's entry, to be filled while s is locked, and sets its end:
// the entry it held, or a new one, zero, after making room for it at now. It
// allocates only for a key it did not hold.
func (s *Shard[V]) Put(key []byte, end, now time.Duration) *V {
	if e, ok := s.m[string(key)]; ok {
		e.end = end
		return &e.v
	}
	if s.m == nil {
		s.m = make(map[string]*entry[V])
	}
	if len(s.m) >= s.share {
		s.makeRoom(now)
	}
	e := &entry[V]{end: end}
	s.m[string(key)] = e
	s.count(1, 0)
	return &e.v
}

// Delete drops key's entry, if s holds one.
func (s *Shard[V]) Delete(key []byte) {
	if _, ok := s.m[string(key)]; ok {
		delete(s.m, string(key))
		s.count(-1, 0)
	}
}

func (s *Shard[V]) count(held int64, evicted uint64) {
	if s.changed != nil {
		s.changed(held, evicted)
	}
}

// makeRoom drops s's entries that have ended at now and, if that leaves
// less than an eighth of its share free, the live ones that end soonest
// until an eighth is.
func (s *Shard[V]) makeRoom(now time.Duration) {
	held := len(s.m)
	for k, e := range s.m {
		if e.end <= now {
			delete(s.m, k)
		}
	}
	keep := s.share - max(s.share/8, 1)
	ended := held - len(s.m)
	if len(s.m) <= keep {
		s.count(-int64(ended), 0)
		return
	}
	ends := make([]time.Duration, 0, len(s.m))
	for _, e := range s.m {
		ends = append(ends, e.end)
	}
	slices.Sort(ends)
	last := ends[len(s.m)-keep-1] // the latest end among those to drop
	live := len(s.m)
	for k, e := range s.m {
		if len(s.m) <= keep {
			break
		}
		if e.end <= last {
			delete(s.m, k)
		}
	}
	s.count(-int64(held-len(s.m)), uint64(live-len(s.m)))
}

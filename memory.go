package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// memShards is the number of independently locked parts of a MemoryCounter.
// A power of two, so that a key's shard is a mask of its hash.
const memShards = 256

// MemoryCounter is a fixed-window Counter that lives in the process: the
// zero-dependency default, right for a single replica. Its windows behave
// like RedisCounter's: the first Incr of a key starts the key's window and
// the count starts again at 1 once the window is over.
//
// Keys are spread over 256 shards. Incrementing a key whose window is live
// takes a shard's read lock and one atomic add, so tenants do not queue
// behind each other. Expired windows are dropped by rotating each shard's map:
// once a shard has gone the longest window it has seen since its last
// rotation, its map becomes the previous generation and the generation before
// is dropped whole, which returns its memory (deleting from a Go map never
// shrinks it). Rotation happens inside Incr, so there is no background
// goroutine; a shard that sees no traffic keeps its memory until it does.
//
// The zero value is an empty counter ready to use, like NewMemoryCounter's.
// A MemoryCounter is safe for concurrent use by multiple goroutines.
type MemoryCounter struct {
	shards [memShards]memShard
	closed atomic.Bool

	// Tests inject a fake clock; nil is the real one.
	now   func() time.Time
	epoch time.Time // now's reading at construction
}

// memSeed spreads keys over shards. One per process is enough to keep
// clients from choosing keys that crowd one shard.
var memSeed = maphash.MakeSeed()

// memEpoch is where the real clock of every MemoryCounter counts from.
var memEpoch = time.Now()

type memShard struct {
	mu        sync.RWMutex
	cur, prev map[string]*memWindow
	rotatedAt int64    // when cur was started, on the counter's clock
	span      int64    // the longest window seen: the rotation period
	_         [72]byte // 128 bytes a shard: no two share a cache line
}

// memWindow is one key's current window. key and end never change once the
// window is in a map; count is bumped without the shard's write lock.
type memWindow struct {
	key   string
	end   int64 // nanoseconds on the counter's clock
	count atomic.Int64
}

var (
	_ Counter    = (*MemoryCounter)(nil)
	_ TTLCounter = (*MemoryCounter)(nil)
)

// NewMemoryCounter returns an empty in-memory counter. It starts no
// goroutine; Close releases its memory.
func NewMemoryCounter() *MemoryCounter {
	return newMemoryCounter(nil)
}

func newMemoryCounter(now func() time.Time) *MemoryCounter {
	m := &MemoryCounter{now: now}
	if now != nil {
		m.epoch = now()
	}
	return m
}

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
	// it before a map keeps it.
	return m.incr(unsafe.Slice(unsafe.StringData(key), len(key)), int64(window))
}

// incr is IncrTTL for a key held in a byte slice, which the limiter builds
// on its stack: looking up string(key) in a map does not allocate, so a live
// window costs no allocation.
func (m *MemoryCounter) incr(key []byte, window int64) (int64, time.Duration, error) {
	if m.closed.Load() {
		return 0, 0, ErrClosed
	}
	now := m.clock()
	s := &m.shards[maphash.Bytes(memSeed, key)&(memShards-1)]

	s.mu.RLock()
	w := s.cur[string(key)]
	s.mu.RUnlock()
	// A window is only ever replaced once it has ended, so adding to one
	// that is live at now is counted in the right window even if it is
	// replaced a moment later.
	if w != nil && now < w.end {
		return w.count.Add(1), time.Duration(w.end - now), nil
	}
	return m.incrLocked(s, key, now, window)
}

// incrLocked handles everything but a live window in the current
// generation: a new key, an ended window, a key found in the previous
// generation, and rotation.
func (m *MemoryCounter) incrLocked(s *memShard, key []byte, now, window int64) (int64, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.closed.Load() {
		return 0, 0, ErrClosed
	}
	s.span = max(s.span, window)
	switch {
	case s.cur == nil:
		s.cur = make(map[string]*memWindow)
		s.rotatedAt = now
	case now-s.rotatedAt >= 2*s.span:
		// Nothing in either generation can still be live.
		s.cur, s.prev = make(map[string]*memWindow), nil
		s.rotatedAt = now
	case now-s.rotatedAt >= s.span:
		// Every window in prev began before the last rotation, a full span
		// ago, so all of them have ended; the live ones of cur are moved
		// back on their next use.
		s.cur, s.prev = make(map[string]*memWindow), s.cur
		s.rotatedAt = now
	}

	w := s.cur[string(key)]
	if w == nil {
		if w = s.prev[string(key)]; w != nil {
			s.cur[w.key] = w
		}
	}
	if w != nil && now < w.end {
		return w.count.Add(1), time.Duration(w.end - now), nil
	}

	// The map keeps its own copy of the key: callers' bytes are reused
	// (the limiter's buffer, Fiber's request memory).
	var k string
	if w != nil {
		k = w.key
	} else {
		k = string(key)
	}
	end := now + window
	if end < now {
		end = math.MaxInt64
	}
	nw := &memWindow{key: k, end: end}
	nw.count.Store(1)
	s.cur[k] = nw
	return 1, time.Duration(end - now), nil
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
		s.cur, s.prev = nil, nil
		s.mu.Unlock()
	}
	return nil
}

// clock returns nanoseconds on the counter's clock. The real clock's
// reading is monotonic, so a wall-clock step does not move windows.
func (m *MemoryCounter) clock() int64 {
	if m.now != nil {
		return int64(m.now().Sub(m.epoch))
	}
	return int64(time.Since(memEpoch))
}

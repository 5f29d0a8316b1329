package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/memstore"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// MemoryCounter is a store that lives in the process: the zero-dependency
// default, right for a single replica. Its windows behave like
// RedisCounter's, fixed or sliding (see Algorithm), and it decides
// everything a store may: costs, quotas, InFlight, giving back, Usage and
// Reset, each request in one step. It counts on the Limiter's clock
// (store.Request's Now); a sliding window is aligned on multiples of its length
// on that clock.
//
// Keys are spread over 256 shards, each an open-addressing hash table.
// Counting in a key whose window is live takes no lock and writes nothing
// but the window's count: a few atomic loads to find it, one atomic add to
// count. A new key or a new window takes the shard's lock. Expired windows
// are dropped by rebuilding a shard's table with only its live windows,
// once the shard has gone the longest window it has seen, or when the
// table fills; the table is sized to what is live, so memory is returned
// as tenants go quiet. Rebuilding happens inside calls, so there is no
// background goroutine: the shards take turns, each one turn per longest
// window the counter has seen. Under any traffic at all, even one call a
// second on one key, an expired window is gone within about the longest
// window after it ends (two, if its shard was busy at its turn), or at the
// next call if calls are further apart than that.
//
// It holds at most MaxKeys windows, one per key: 1,000,000 unless told
// otherwise, which a gateway does not meet in normal use, and a ceiling
// for one whose clients flood it with new keys (tenant IDs they choose,
// or the 2^32 IPv6 /64 prefixes of a routed /32 under AnonymousByIP).
// A new key always gets a window; see MaxKeys for what is guaranteed.
//
// The zero value is an empty counter ready to use, like NewMemoryCounter's,
// with the default bound. A MemoryCounter is safe for concurrent use by
// multiple goroutines.
type MemoryCounter struct {
	engine memstore.Store // its zero value is the default's
	owners keyOwners

	// now is the clock of Incr, which no Request carries: the real one
	// unless a test injects another.
	now func() time.Time
}

var _ store.Store = (*MemoryCounter)(nil)

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
	m := &MemoryCounter{}
	maxKeys := 0
	for _, o := range opts {
		if o.maxKeys != 0 {
			maxKeys = o.maxKeys
		}
	}
	m.engine.Init(maxKeys)
	return m
}

// Evicted returns how many windows m has dropped while they were live, to
// stay within MaxKeys: each let its key start a fresh window early, and so
// gave its tenant a fresh budget. Windows dropped after they ended, and
// those that Close drops, are not counted. A count that grows says that
// the bound is too small for the traffic, or that a client floods the
// counter with new keys.
func (m *MemoryCounter) Evicted() uint64 { return m.engine.Evicted() }

// keysBound is the most keys c holds when it is a MemoryCounter (its
// MaxKeys), else the default bound of one.
func keysBound(c store.Store) int {
	if m, ok := c.(*MemoryCounter); ok {
		return m.engine.Bound()
	}
	var zero memstore.Store
	return zero.Bound()
}

// errClosed is returned by a MemoryCounter's methods after its Close.
var errClosed = errors.New("ratelimit: counter is closed")

// Close drops every window and makes later calls return an error saying so. It is
// safe to call more than once; there is no background work to stop.
func (m *MemoryCounter) Close() error {
	m.engine.Close()
	return nil
}

// Incr bumps the counter for key and returns the count after the increment.
// It never blocks on anything but a shard's lock, so ctx is not consulted.
func (m *MemoryCounter) Incr(_ context.Context, key string, window time.Duration) (int64, error) {
	var now int64
	if m.now == nil {
		now = memstore.Now()
	} else {
		now = memstore.Nanos(m.now())
	}
	// A read-only view of key's bytes: the engine copies a key it keeps.
	n, _, err := m.engine.Incr(unsafe.Slice(unsafe.StringData(key), len(key)), window, now)
	if err != nil {
		return n, memoryError(err)
	}
	return n, nil
}

// Attach claims b's keys for its limiter: two limiters with the same Name
// (or none) count in the same keys, so they must agree on the budget. A
// MemoryCounter is local, called without deadline or breaker.
func (m *MemoryCounter) Attach(b *store.Budget, plans bool) (store.Info, error) {
	return store.Info{Features: store.All, Local: true}, m.owners.claim(b, plans)
}

// Take decides r in one step. A live window costs no allocation: the
// engine copies the key only into a new window.
func (m *MemoryCounter) Take(_ context.Context, r *store.Request, res *store.Result) error {
	if len(r.Quotas) != 0 || r.Algorithm == InFlight || r.Cost == 0 {
		return m.take(r, res)
	}
	// The usual request: one window, in the engine's shortest path.
	st := &res.Counts[0]
	var err error
	if r.Algorithm == TokenBucket {
		b := window.NewBucket(r.Limit, r.Window, r.Burst)
		err = m.engine.TakeBucket(r.Key, b, r.Cost, r.Delay, memstore.Nanos(r.Now), st)
	} else {
		err = m.engine.TakeWindow(r.Key, r.Algorithm, r.Cost, r.Limit, r.Window, memstore.Nanos(r.Now), st)
	}
	if err != nil {
		return memoryError(err)
	}
	res.Allowed = st.Fits
	return nil
}

// take is Take for a request with quotas, of slots in flight, or a read.
func (m *MemoryCounter) take(r *store.Request, res *store.Result) error {
	if r.Cost == 0 {
		return memoryError(m.engine.Read(r, res))
	}
	return memoryError(m.engine.Take(r, res))
}

// Give gives back what a Take of r took (see store.Store).
func (m *MemoryCounter) Give(_ context.Context, r *store.Request, marks store.Marks) error {
	return memoryError(m.engine.Give(r, marks))
}

// Reset ends r's windows at once.
func (m *MemoryCounter) Reset(_ context.Context, r *store.Request) error {
	return memoryError(m.engine.Reset(r.Key, r.Now))
}

// memoryError is err as a MemoryCounter returns it.
func memoryError(err error) error {
	if errors.Is(err, memstore.ErrClosed) {
		return errClosed
	}
	return err
}

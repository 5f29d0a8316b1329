// Helpers shared by the package's tests: a fake clock, a Store counted in by
// Incr on it, and keys that land in a chosen shard.

package memstore

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/testkit/fakeclock"
)

// fakeClock is a clock that moves only when told to.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New() }

// counter is a Store counted in by Incr on a fake clock, as the seed's
// Counter is.
type counter struct {
	*Store
	clock *fakeClock
}

// newCounter returns an empty Store on clock, bounded to maxKeys windows
// when given.
func newCounter(clock *fakeClock, maxKeys ...int) *counter {
	m := &Store{}
	for _, n := range maxKeys {
		m.Init(n)
	}
	return &counter{Store: m, clock: clock}
}

// bounded returns an empty Store of bound n.
func bounded(n int) *Store {
	m := &Store{}
	m.Init(n)
	return m
}

// incr is the seed's Incr of key.
func (c *counter) incr(key string, width time.Duration) (int64, error) {
	n, _, err := c.Store.Incr(unsafe.Slice(unsafe.StringData(key), len(key)), width, Nanos(c.clock.Now()))
	return n, err
}

// entries counts the windows a MemoryCounter holds, ended or not.
func (m *Store) entries() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		if t := s.table.Load(); t != nil {
			n += t.used
		}
		s.mu.Unlock()
	}
	return n
}

// keysInShard returns n distinct keys that land in shard.
func keysInShard(shard uint64, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("rl:k%d", i)
		if shardOf(maphash.String(seed, k)) == shard {
			keys = append(keys, k)
		}
	}
	return keys
}

func mustIncr(t *testing.T, c *counter, key string, window time.Duration) int64 {
	t.Helper()
	n, err := c.incr(key, window)
	if err != nil {
		t.Fatalf("Incr(%s): %v", key, err)
	}
	return n
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

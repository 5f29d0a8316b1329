// Tests that a Store gives back the memory of ended windows: swept from
// shards no call lands on, and returned to the heap.

package memstore

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// heapAlloc returns the bytes the heap holds once garbage is collected.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fillKeys increments n distinct keys once each, built in one reused buffer
// so that the heap holds only what the counter keeps.
func fillKeys(t *testing.T, m *counter, prefix string, n int, window time.Duration) {
	t.Helper()
	buf := []byte(prefix)
	for i := range n {
		key := strconv.AppendInt(buf[:len(prefix)], int64(i), 10)
		mustIncr(t, m, unsafeString(key), window)
	}
}

// Shards that no call lands on still give back their expired windows, under
// traffic of any rate: a scan of many keys, then one tenant alone.
func TestStoreSweepsQuietShards(t *testing.T) {
	const window = 50 * time.Millisecond
	for _, tc := range []struct {
		name  string
		every time.Duration // between calls on the one key
		calls int
	}{
		{"a call every tenth of a window", window / 10, 30},
		{"a call every half window", window / 2, 6},
		{"a call every window", window, 3},
		{"one call after a long pause", 20 * window, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			m := newCounter(clock)
			fillKeys(t, m, "rl:scan", 10000, window)
			for range tc.calls {
				clock.Advance(tc.every)
				mustIncr(t, m, "rl:acme", window)
			}
			if got := m.entries(); got != 1 {
				t.Fatalf("entries = %d, want 1 (rl:acme): every expired window should be gone", got)
			}
		})
	}
}

// The case, a third of its size to stay fast under -race: 100,000
// tenants on a 50 ms window, then one tenant only. The heap comes back near
// where it started within a few windows.
func TestStoreGivesMemoryBack(t *testing.T) {
	const window, keys = 50 * time.Millisecond, 100000
	clock := newFakeClock()
	m := newCounter(clock)
	start := heapAlloc()
	fillKeys(t, m, "rl:scan", keys, window)
	full := heapAlloc()
	if full < start+keys*32 {
		t.Fatalf("heap grew by %d bytes for %d keys: the measurement is off", full-start, keys)
	}
	for range 30 { // three windows, a call every tenth of one
		clock.Advance(window / 10)
		mustIncr(t, m, "rl:acme", window)
	}
	end := heapAlloc()
	runtime.KeepAlive(m)
	t.Logf("heap: %d at start, +%d full, +%d after three windows", start, int64(full-start), int64(end-start))
	// A counter with nothing but empty shards holds a few tens of KiB;
	// allow that plus whatever else the process did meanwhile.
	if end > start+(full-start)/20 {
		t.Fatalf("heap %d bytes above its start after three windows of one tenant, %d when full: want under a twentieth of that",
			int64(end-start), full-start)
	}
}

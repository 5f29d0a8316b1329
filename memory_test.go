package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// entries counts the windows a MemoryCounter holds, ended or not.
func (m *MemoryCounter) entries() int {
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
		if memShardOf(maphash.String(memSeed, k)) == shard {
			keys = append(keys, k)
		}
	}
	return keys
}

func mustIncr(t *testing.T, c Counter, key string, window time.Duration) int64 {
	t.Helper()
	n, err := c.Incr(context.Background(), key, window)
	if err != nil {
		t.Fatalf("Incr(%s): %v", key, err)
	}
	return n
}

func TestMemoryCounterDropsExpiredWindows(t *testing.T) {
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
	const window = time.Second
	for i := range 10000 {
		mustIncr(t, m, fmt.Sprintf("rl:old%d", i), window)
	}
	if got := m.entries(); got != 10000 {
		t.Fatalf("entries after 10000 keys = %d", got)
	}

	// Two windows on, nothing old is live: each shard's next rebuild keeps
	// none of it.
	clock.Advance(2 * window)
	for i := range 10000 {
		mustIncr(t, m, fmt.Sprintf("rl:new%d", i), window)
	}
	if got := m.entries(); got != 10000 {
		t.Fatalf("entries after the old keys expired = %d, want 10000 (only the new keys)", got)
	}
}

func TestMemoryCounterRebuildKeepsLiveWindows(t *testing.T) {
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
	k := keysInShard(7, 4)
	a, b, c, d := k[0], k[1], k[2], k[3]
	const window = 10 * time.Second

	mustIncr(t, m, a, window) // t=0: a's window ends at 10s
	clock.Advance(6 * time.Second)
	mustIncr(t, m, b, window) // t=6: b's window ends at 16s
	clock.Advance(4 * time.Second)
	mustIncr(t, m, c, window) // t=10: a span since the table was built: rebuild
	if got := m.entries(); got != 2 {
		t.Fatalf("entries after the first rebuild = %d, want 2 (b, live, and c; a ended)", got)
	}
	clock.Advance(2 * time.Second)
	// t=12: b's window began before the rebuild and is live.
	if got := mustIncr(t, m, b, window); got != 2 {
		t.Fatalf("b after the rebuild = %d, want 2: a live window must survive it", got)
	}
	clock.Advance(8 * time.Second)
	mustIncr(t, m, d, window) // t=20: rebuild again; b and c have ended
	if got := m.entries(); got != 1 {
		t.Fatalf("entries after the second rebuild = %d, want 1 (d)", got)
	}
	if got := mustIncr(t, m, a, window); got != 1 {
		t.Fatalf("a after its window = %d, want 1", got)
	}
}

// A shard's table grows as keys arrive and keeps every live window through
// each rebuild; its size follows what is live.
func TestMemoryCounterGrowsAndShrinks(t *testing.T) {
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
	keys := keysInShard(3, 1000)
	for _, k := range keys {
		mustIncr(t, m, k, time.Minute)
	}
	for _, k := range keys {
		if got := mustIncr(t, m, k, time.Minute); got != 2 {
			t.Fatalf("%s = %d after growth, want 2", k, got)
		}
	}
	s := &m.shards[3]
	if n := len(s.table.Load().slots); n < 2000 {
		t.Fatalf("table of %d slots for 1000 keys, want at least twice as many", n)
	}
	clock.Advance(time.Minute)
	mustIncr(t, m, keys[0], time.Minute) // a span on: rebuilt with one live key
	if n := len(s.table.Load().slots); n > 8 {
		t.Fatalf("table of %d slots for 1 live key, want it shrunk to 8", n)
	}
}

// Counting stays exact while windows end and shards rotate between bursts
// of concurrent increments.
func TestMemoryCounterExactAcrossWindows(t *testing.T) {
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
	const window = time.Second
	keys := []string{"rl:a", "rl:b", "rl:c", "rl:d"}
	for phase := range 5 {
		var mu sync.Mutex
		got := map[string][]int64{}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 100 {
					key := keys[(g+i)%len(keys)]
					n, err := m.Incr(context.Background(), key, window)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					got[key] = append(got[key], n)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, key := range keys {
			ns := got[key]
			slices.Sort(ns)
			for i, n := range ns {
				if n != int64(i+1) {
					t.Fatalf("phase %d, %s: sorted counts[%d] = %d, want %d", phase, key, i, n, i+1)
				}
			}
		}
		clock.Advance(window)
	}
}

func TestMemoryCounterClose(t *testing.T) {
	before := goroutines()
	m := NewMemoryCounter()
	mustIncr(t, m, "rl:acme", time.Minute)
	if err := m.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := m.Incr(context.Background(), "rl:acme", time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("Incr after Close = %v, want ErrClosed", err)
	}
	if _, err := m.Incr(context.Background(), "rl:new", time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("Incr of a new key after Close = %v, want ErrClosed", err)
	}
	if got := m.entries(); got != 0 {
		t.Errorf("entries after Close = %d, want 0", got)
	}
	checkNoGoroutineLeft(t, before)
}

func TestMemoryCounterZeroValue(t *testing.T) {
	var m MemoryCounter
	for want := int64(1); want <= 2; want++ {
		if got := mustIncr(t, &m, "rl:acme", time.Minute); got != want {
			t.Fatalf("Incr #%d on a zero MemoryCounter = %d, want %d", want, got, want)
		}
	}
}

func TestMemoryCounterKeepsItsOwnKey(t *testing.T) {
	m := newMemoryCounter(newFakeClock().Now)
	buf := []byte("rl:acme")
	// The key aliases buf, as a key built over Fiber's request memory can.
	key := unsafeString(buf)
	mustIncr(t, m, key, time.Minute)
	copy(buf, "rl:zzzz")
	if got := mustIncr(t, m, "rl:acme", time.Minute); got != 2 {
		t.Fatalf("rl:acme after its caller's buffer changed = %d, want 2", got)
	}
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Counting stays exact while one shard's table grows and is rebuilt under
// concurrent increments: new keys arrive in every phase, so inserts and
// rebuilds run while other goroutines read the table.
func TestMemoryCounterExactWhileTablesGrow(t *testing.T) {
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
	const window, goroutines, perKey = time.Second, 8, 4
	keys := keysInShard(5, 300)
	for phase := range 3 {
		counts := make([][]int64, len(keys))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for round := range perKey {
					for j := range keys {
						k := (j*7 + g*31 + round) % len(keys) // each goroutine its own order
						n, err := m.Incr(context.Background(), keys[k], window)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						counts[k] = append(counts[k], n)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		for k, ns := range counts {
			slices.Sort(ns)
			for i, n := range ns {
				if n != int64(i+1) {
					t.Fatalf("phase %d, %s: sorted counts[%d] = %d, want %d", phase, keys[k], i, n, i+1)
				}
			}
		}
		clock.Advance(window)
	}
}

// heapAlloc returns the bytes the heap holds once garbage is collected.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fillKeys increments n distinct keys once each, built in one reused buffer
// so that the heap holds only what the counter keeps.
func fillKeys(t *testing.T, m *MemoryCounter, prefix string, n int, window time.Duration) {
	t.Helper()
	buf := []byte(prefix)
	for i := range n {
		key := strconv.AppendInt(buf[:len(prefix)], int64(i), 10)
		mustIncr(t, m, unsafeString(key), window)
	}
}

// Shards that no call lands on still give back their expired windows, under
// traffic of any rate: a scan of many keys, then one tenant alone.
func TestMemoryCounterSweepsQuietShards(t *testing.T) {
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
			m := newMemoryCounter(clock.Now)
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
func TestMemoryCounterGivesMemoryBack(t *testing.T) {
	const window, keys = 50 * time.Millisecond, 100000
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
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

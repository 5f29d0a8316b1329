package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// entries counts the windows a MemoryCounter holds in both generations.
func (m *MemoryCounter) entries() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.RLock()
		n += len(s.cur) + len(s.prev)
		s.mu.RUnlock()
	}
	return n
}

// keysInShard returns n distinct keys that land in shard.
func keysInShard(shard uint64, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("rl:k%d", i)
		if maphash.String(memSeed, k)&(memShards-1) == shard {
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

	// Two spans on, nothing old can be live: the first touch of each shard
	// drops both of its generations.
	clock.Advance(2 * window)
	for i := range 10000 {
		mustIncr(t, m, fmt.Sprintf("rl:new%d", i), window)
	}
	if got := m.entries(); got != 10000 {
		t.Fatalf("entries after the old keys expired = %d, want 10000 (only the new keys)", got)
	}
}

func TestMemoryCounterRotationKeepsLiveWindows(t *testing.T) {
	clock := newFakeClock()
	m := newMemoryCounter(clock.Now)
	k := keysInShard(7, 4)
	a, b, c, d := k[0], k[1], k[2], k[3]
	const window = 10 * time.Second

	mustIncr(t, m, a, window) // t=0: a's window ends at 10s
	clock.Advance(6 * time.Second)
	mustIncr(t, m, b, window) // t=6: b's window ends at 16s
	clock.Advance(4 * time.Second)
	mustIncr(t, m, c, window) // t=10: a span since the shard began: rotate
	if got := m.entries(); got != 3 {
		t.Fatalf("entries after the first rotation = %d, want 3 (a and b in prev, c in cur)", got)
	}
	clock.Advance(2 * time.Second)
	// t=12: b lives in the previous generation and its window is live.
	if got := mustIncr(t, m, b, window); got != 2 {
		t.Fatalf("b after rotation = %d, want 2: a live window must survive rotation", got)
	}
	clock.Advance(8 * time.Second)
	mustIncr(t, m, d, window) // t=20: rotate again; a is dropped with its generation
	if got := m.entries(); got != 3 {
		t.Fatalf("entries after the second rotation = %d, want 3 (b, c in prev, d in cur)", got)
	}
	if got := mustIncr(t, m, a, window); got != 1 {
		t.Fatalf("a after its window = %d, want 1", got)
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
	before := runtime.NumGoroutine()
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
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after Close", before, after)
	}
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

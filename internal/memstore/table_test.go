package memstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/goroutines"
)

func TestStoreDropsExpiredWindows(t *testing.T) {
	clock := newFakeClock()
	m := newCounter(clock)
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

func TestStoreRebuildKeepsLiveWindows(t *testing.T) {
	clock := newFakeClock()
	m := newCounter(clock)
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
func TestStoreGrowsAndShrinks(t *testing.T) {
	clock := newFakeClock()
	m := newCounter(clock)
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
func TestStoreExactAcrossWindows(t *testing.T) {
	clock := newFakeClock()
	m := newCounter(clock)
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
					n, err := m.incr(key, window)
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

func TestStoreClose(t *testing.T) {
	before := goroutines.Now()
	m := newCounter(newFakeClock())
	mustIncr(t, m, "rl:acme", time.Minute)
	m.Close()
	m.Close()
	if _, err := m.incr("rl:acme", time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("Incr after Close = %v, want ErrClosed", err)
	}
	if _, err := m.incr("rl:new", time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("Incr of a new key after Close = %v, want ErrClosed", err)
	}
	if got := m.entries(); got != 0 {
		t.Errorf("entries after Close = %d, want 0", got)
	}
	goroutines.NoneLeft(t, before)
}

func TestStoreZeroValue(t *testing.T) {
	m := &counter{Store: &Store{}, clock: newFakeClock()}
	for want := int64(1); want <= 2; want++ {
		if got := mustIncr(t, m, "rl:acme", time.Minute); got != want {
			t.Fatalf("Incr #%d on a zero Store = %d, want %d", want, got, want)
		}
	}
}

func TestStoreKeepsItsOwnKey(t *testing.T) {
	m := newCounter(newFakeClock())
	buf := []byte("rl:acme")
	// The key aliases buf, as a key built over Fiber's request memory can.
	key := unsafeString(buf)
	mustIncr(t, m, key, time.Minute)
	copy(buf, "rl:zzzz")
	if got := mustIncr(t, m, "rl:acme", time.Minute); got != 2 {
		t.Fatalf("rl:acme after its caller's buffer changed = %d, want 2", got)
	}
}

// Counting stays exact while one shard's table grows and is rebuilt under
// concurrent increments: new keys arrive in every phase, so inserts and
// rebuilds run while other goroutines read the table.
func TestStoreExactWhileTablesGrow(t *testing.T) {
	clock := newFakeClock()
	m := newCounter(clock)
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
						n, err := m.incr(keys[k], window)
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

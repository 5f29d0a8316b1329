// Tests of the Store's bound on the windows it holds (MaxKeys): how it is
// shared over the shards, and which windows a full Store evicts.

package memstore

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// holds reports whether m holds a window of key, ended or not.
func (m *Store) holds(key string) bool {
	h := maphash.String(seed, key)
	s := &m.shards[shardOf(h)&^m.shardsOff]
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.table.Load()
	if t == nil {
		return false
	}
	_, w := t.find(h, []byte(key))
	return w != nil
}

// memTake takes one request of key from m in windows of width by algo,
// under a limit never reached, and returns the key's window after it: its
// count and, for a sliding window, the count of the window before.
func memTake(t *testing.T, m *counter, key string, width time.Duration, kind store.Algorithm) (cur, prev int64) {
	t.Helper()
	var st store.Count
	err := m.TakeWindow([]byte(key), kind, 1, 1<<40, width, Nanos(m.clock.Now()), &st)
	if err != nil || !st.Fits {
		t.Fatalf("take(%s) = %v, fits %v", key, err, st.Fits)
	}
	return st.N, st.Prev
}

// The bound is split over the shards without losing a window, and the
// zero value's is the default.
func TestStoreShares(t *testing.T) {
	for _, tc := range []struct {
		name   string
		m      *Store
		n      int
		shards uint64
	}{
		{"zero value", &Store{}, 1_000_000, 256},
		{"0", bounded(0), 1_000_000, 256},
		{"1", bounded(1), 1, 1},
		{"2047", bounded(2047), 2047, 1},
		{"2048", bounded(2048), 2048, 2},
		{"5000", bounded(5000), 5000, 4},
		{"262143", bounded(262143), 262143, 128},
		{"262144", bounded(262144), 262144, 256},
		{"1000003", bounded(1000003), 1000003, 256},
	} {
		shards := uint64(shards) - tc.m.shardsOff
		sum := 0
		for i := range shards {
			sum += tc.m.share(i)
		}
		if shards != tc.shards || sum != tc.n {
			t.Errorf("%s: %d shards holding %d windows, want %d holding %d", tc.name, shards, sum, tc.shards, tc.n)
		}
	}
}

// The zero value holds its shards to their share of a million windows.
func TestStoreZeroValueBound(t *testing.T) {
	m := &counter{Store: &Store{}, clock: newFakeClock()}
	share := 1_000_000 / shards
	keys := keysInShard(200, share+1) // shard 200 has no window of the remainder
	for _, k := range keys {
		mustIncr(t, m, k, time.Hour)
	}
	if got, want := m.entries(), share-share/8+1; got != want || m.Evicted() != uint64(share+1-want) {
		t.Fatalf("after %d keys in one shard, %d held and %d evicted, want %d held and %d evicted",
			len(keys), got, m.Evicted(), want, share+1-want)
	}
}

// A flood of new keys from many goroutines: the counter never holds more
// than MaxKeys windows, every key gets one, and every window dropped was
// live (nothing ends on this clock), so that evicted and held add up to the
// keys counted.
func TestStoreBoundUnderFlood(t *testing.T) {
	for _, n := range []int{1, 7, 100, 3000, 5000} {
		t.Run(fmt.Sprintf("MaxKeys(%d)", n), func(t *testing.T) {
			m := newCounter(newFakeClock(), n)
			const goroutines = 8
			each := n/2 + 200
			done := make(chan struct{})
			checked := make(chan int)
			go func() { // the bound holds throughout, not only at the end
				most := 0
				for {
					most = max(most, m.entries())
					select {
					case <-done:
						checked <- most
						return
					default:
					}
				}
			}()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					buf := []byte(fmt.Sprintf("rl:flood%d:", g))
					for i := range each {
						key := strconv.AppendInt(buf, int64(i), 10)
						if n, err := m.incr(unsafeString(key), time.Minute); err != nil || n != 1 {
							t.Errorf("Incr of a new key = %d, %v; want 1, nil", n, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(done)
			if most := <-checked; most > n {
				t.Errorf("%d windows held during the flood, more than MaxKeys(%d)", most, n)
			}
			held := m.entries()
			if held > n || held == 0 {
				t.Errorf("%d windows held after the flood, want 1 to %d", held, n)
			}
			if got := m.Evicted() + uint64(held); got != goroutines*uint64(each) {
				t.Errorf("%d evicted + %d held = %d, want the %d keys counted", m.Evicted(), held, got, goroutines*each)
			}
		})
	}
}

// Keys whose windows end last are never the ones dropped: their counts stay
// exact while a flood of shorter windows churns through the bound.
func TestStoreExactUnderFlood(t *testing.T) {
	m := newCounter(newFakeClock(), 64)
	hot := []string{"rl:a", "rl:b", "rl:c", "rl:d"}
	const callers, perCaller = 4, 500
	var mu sync.Mutex
	counts := map[string][]int64{}
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range perCaller {
				key := hot[(g+i)%len(hot)]
				n := mustIncr(t, m, key, time.Hour)
				mu.Lock()
				counts[key] = append(counts[key], n)
				mu.Unlock()
			}
		})
		wg.Go(func() {
			for i := range 2000 {
				mustIncr(t, m, fmt.Sprintf("rl:flood%d:%d", g, i), time.Minute)
			}
		})
	}
	wg.Wait()
	if m.Evicted() == 0 {
		t.Fatal("nothing evicted: the flood did not reach the bound")
	}
	for _, key := range hot {
		ns := counts[key]
		slices.Sort(ns)
		for i, n := range ns {
			if n != int64(i+1) {
				t.Fatalf("%s: sorted counts[%d] = %d, want %d: a window that ends last was dropped", key, i, n, i+1)
			}
		}
	}
}

// A full counter drops the window that ends soonest: a sliding window ends
// a window after its own, and one that has ended is dropped without being
// an eviction.
func TestStoreEvictsSoonestEnding(t *testing.T) {
	type win struct {
		key   string
		at    time.Duration // when it starts, from the clock's epoch
		width time.Duration
		kind  store.Algorithm
	}
	fixed := func(key string, at, width time.Duration) win { return win{key, at, width, store.FixedWindow} }
	for _, tc := range []struct {
		name    string
		held    []win // a bound of 4: one shard, full
		at      time.Duration
		dropped string
		evicted uint64
	}{
		{"the first of equal windows to end", []win{
			fixed("a", 0, 10*time.Second), fixed("b", time.Second, 10*time.Second),
			fixed("c", 2*time.Second, 10*time.Second), fixed("d", 3*time.Second, 10*time.Second),
		}, 4 * time.Second, "a", 1},
		{"a longer window ends later", []win{
			fixed("a", 0, time.Minute), fixed("b", time.Second, 10*time.Second),
			fixed("c", 2*time.Second, 10*time.Second), fixed("d", 3*time.Second, 10*time.Second),
		}, 4 * time.Second, "b", 1},
		{"a sliding window ends a window after its own", []win{
			{"a", 0, 10 * time.Second, store.SlidingWindow}, // weighed until 20s
			fixed("b", 5*time.Second, 10*time.Second),       // ends at 15s
			fixed("c", 5*time.Second, time.Minute), fixed("d", 5*time.Second, time.Minute),
		}, 6 * time.Second, "b", 1},
		{"a sliding window past its own end is live", []win{
			{"a", 0, 10 * time.Second, store.SlidingWindow},
			fixed("b", 0, 30*time.Second),
			fixed("c", 0, time.Minute), fixed("d", 0, time.Minute),
		}, 12 * time.Second, "a", 1},
		{"an ended window is dropped, not evicted", []win{
			fixed("a", 0, 10*time.Second), fixed("b", time.Second, time.Minute),
			fixed("c", 2*time.Second, time.Minute), fixed("d", 3*time.Second, time.Minute),
		}, 11 * time.Second, "a", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			m := newCounter(clock, 4)
			var now time.Duration
			for _, w := range tc.held {
				clock.Advance(w.at - now)
				now = w.at
				memTake(t, m, w.key, w.width, w.kind)
			}
			clock.Advance(tc.at - now)
			mustIncr(t, m, "new", time.Minute)
			if m.Evicted() != tc.evicted {
				t.Errorf("Evicted = %d, want %d", m.Evicted(), tc.evicted)
			}
			for _, w := range append(tc.held, fixed("new", 0, 0)) {
				if got, want := m.holds(w.key), w.key != tc.dropped; got != want {
					t.Errorf("holds %s = %v, want %v (%s dropped)", w.key, got, want, tc.dropped)
				}
			}
		})
	}
}

// Of a batch of dropped windows, only those still live are evictions.
func TestStoreEvictedCountsLiveOnly(t *testing.T) {
	clock := newFakeClock()
	m := newCounter(clock, 16) // a batch of 2
	mustIncr(t, m, "rl:short", time.Second)
	for i := range 15 {
		mustIncr(t, m, fmt.Sprintf("rl:long%d", i), time.Minute)
	}
	clock.Advance(2 * time.Second)
	mustIncr(t, m, "rl:new", time.Minute) // drops rl:short, ended, and one live window
	if got := m.Evicted(); got != 1 {
		t.Fatalf("Evicted = %d after dropping an ended window and a live one, want 1", got)
	}
	if got := m.entries(); got != 15 {
		t.Fatalf("%d windows held, want 15: 16 less a batch of 2, and the new one", got)
	}
	clock.Advance(2 * time.Minute) // every window ends and is dropped
	for i := range 16 {
		mustIncr(t, m, fmt.Sprintf("rl:next%d", i), time.Minute)
	}
	m.Close()
	if got := m.Evicted(); got != 1 {
		t.Fatalf("Evicted = %d after windows ended and Close, want still 1", got)
	}
}

// A key whose window was evicted starts afresh: a fixed window with a
// whole window ahead, a sliding one without the window before it.
func TestStoreEvictedKeyStartsAfresh(t *testing.T) {
	t.Run("fixed", func(t *testing.T) {
		clock := newFakeClock()
		m := newCounter(clock, 1)
		for range 3 {
			mustIncr(t, m, "rl:a", time.Minute)
		}
		clock.Advance(10 * time.Second)
		mustIncr(t, m, "rl:b", time.Minute)
		clock.Advance(10 * time.Second)
		n, ttl, err := m.Incr([]byte("rl:a"), time.Minute, Nanos(m.clock.Now()))
		if err != nil || n != 1 || ttl != time.Minute {
			t.Fatalf("rl:a after its eviction = %d, %v, %v; want 1, %v, nil", n, ttl, err, time.Minute)
		}
		if got := m.Evicted(); got != 2 {
			t.Fatalf("Evicted = %d, want 2 (rl:a, then rl:b)", got)
		}
	})
	t.Run("sliding", func(t *testing.T) {
		clock := newFakeClock()
		m := newCounter(clock, 1)
		for range 3 {
			memTake(t, m, "rl:a", 10*time.Second, store.SlidingWindow)
		}
		clock.Advance(11 * time.Second) // rl:a's window has ended; the next one weighs it
		mustIncr(t, m, "rl:b", time.Minute)
		clock.Advance(time.Second)
		if cur, prev := memTake(t, m, "rl:a", 10*time.Second, store.SlidingWindow); cur != 1 || prev != 0 {
			t.Fatalf("rl:a after its eviction: %d in its window, %d in the one before; want 1 and 0", cur, prev)
		}
	})
}

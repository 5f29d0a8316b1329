package memstore

import (
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

	"github.com/gatewaykit/ratelimit/internal/testkit/fakeclock"

	"github.com/gatewaykit/ratelimit/internal/testkit/goroutines"
	"github.com/gatewaykit/ratelimit/store"
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

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

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

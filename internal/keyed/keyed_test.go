package keyed

import (
	"strconv"
	"testing"
	"time"
)

// counter records what a Map reports of the keys it holds.
type counter struct {
	held    int64
	evicted uint64
}

func (c *counter) changed(held int64, evicted uint64) { c.held += held; c.evicted += evicted }

// put stores v under key, ending at end, at now.
func put(m *Map[int], key string, v int, end, now time.Duration) {
	s := m.Lock([]byte(key))
	*s.Put([]byte(key), end, now) = v
	s.Unlock()
}

// get returns key's value at now, and whether m holds it.
func get(m *Map[int], key string, now time.Duration) (int, bool) {
	s := m.Lock([]byte(key))
	defer s.Unlock()
	v, ok := s.Get([]byte(key), now)
	if !ok {
		return 0, false
	}
	return *v, true
}

// The bound is split over the shards, none holding less than minShare
// unless the whole bound is less, and no more shards than maxShards.
func TestShardsShareTheBound(t *testing.T) {
	for _, c := range []struct {
		bound, shards, share int
	}{
		{1, 1, 1},
		{100, 1, 100},
		{2047, 1, 2047},
		{2048, 2, 1024},
		{16 * 1024, 16, 1024},
		{16*1024 + 5, 16, 1024}, // 5 shards hold one more
		{1_000_000, 64, 15625},
	} {
		m := New[int](c.bound, nil)
		total := 0
		for i := range m.shards {
			total += m.shards[i].share
			if s := m.shards[i].share; s != c.share && s != c.share+1 {
				t.Errorf("bound %d: shard %d holds %d, want %d", c.bound, i, s, c.share)
			}
		}
		if len(m.shards) != c.shards || total != c.bound {
			t.Errorf("bound %d: %d shards holding %d in all, want %d holding %d", c.bound, len(m.shards), total, c.shards, c.bound)
		}
	}
}

// An entry is held until its end, and then dropped, counted; putting a
// key held again changes its entry and its end, and holds no more keys.
func TestEntriesEnd(t *testing.T) {
	var c counter
	m := New[int](10, c.changed)
	put(m, "a", 1, 10*time.Second, 0)
	for _, step := range []struct {
		now  time.Duration
		want bool
	}{{0, true}, {10*time.Second - 1, true}, {10 * time.Second, false}, {11 * time.Second, false}} {
		if v, ok := get(m, "a", step.now); ok != step.want || ok && v != 1 {
			t.Errorf("at %v: %d, %v; want held %v", step.now, v, ok, step.want)
		}
	}
	if c.held != 0 || m.Len() != 0 {
		t.Errorf("after the end: %d held by the count, %d by the map; want 0", c.held, m.Len())
	}
	put(m, "b", 1, time.Second, 0)
	put(m, "b", 2, time.Minute, 0)
	if v, ok := get(m, "b", 30*time.Second); !ok || v != 2 || c.held != 1 {
		t.Errorf("b put twice: %d, %v, %d held; want 2, the later end, 1 held", v, ok, c.held)
	}
	s := m.Lock([]byte("b"))
	s.Delete([]byte("b"))
	s.Delete([]byte("b"))
	s.Unlock()
	if c.held != 0 || c.evicted != 0 {
		t.Errorf("b deleted twice: %d held, %d evicted; want 0, 0", c.held, c.evicted)
	}
}

// TakeShard takes every entry out of each shard, returning the live ones
// with their keys and ends, and the count says they are gone.
func TestTakeShard(t *testing.T) {
	var c counter
	m := New[int](4096, c.changed) // two shards
	for i := range 100 {
		put(m, strconv.Itoa(i), i, time.Duration(i)*time.Second, 0)
	}
	got := map[string]int{}
	for i := range m.Shards() {
		for _, it := range m.TakeShard(i, 50*time.Second) {
			if it.End != time.Duration(it.V)*time.Second {
				t.Errorf("%s: ends at %v, want %v", it.Key, it.End, time.Duration(it.V)*time.Second)
			}
			got[it.Key] = it.V
		}
	}
	if len(got) != 49 || got["51"] != 51 || got["99"] != 99 {
		t.Errorf("took %d entries (%v); want the 49 live at 50s, 51 to 99", len(got), got)
	}
	if _, ok := got["50"]; ok || m.Len() != 0 || c.held != 0 {
		t.Errorf("after taking every shard: 50, ended, taken %v, %d in the map, %d held by the count; want none", ok, m.Len(), c.held)
	}
}

// A new key that finds its shard full makes room: the entries that have
// ended go first, uncounted as evictions; then, if less than an eighth of
// the share is free, the live ones that end soonest, counted, until an
// eighth is.
func TestMakingRoom(t *testing.T) {
	const share = 16 // one shard; an eighth is 2
	for _, c := range []struct {
		name    string
		ended   int // of the share, entries that have ended when the new key comes
		evicted int // live entries dropped for it
		held    int // after the new key
	}{
		{"none ended", 0, 2, share - 1},
		{"one ended", 1, 1, share - 1},
		{"an eighth ended", 2, 0, share - 1},
		{"more than an eighth ended", 3, 0, share - 2},
		{"all ended", share, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n counter
			m := New[int](share, n.changed)
			now := time.Hour
			// Entry i ends i seconds after now, or, for the ended ones,
			// before now.
			for i := range share {
				end := now + time.Duration(i+1)*time.Second
				if i < c.ended {
					end = now - time.Second
				}
				put(m, "k"+strconv.Itoa(i), i, end, 0)
			}
			put(m, "new", -1, now+time.Minute, now)
			if int(n.held) != c.held || int(n.evicted) != c.evicted || m.Len() != c.held {
				t.Fatalf("%d held (the map says %d), %d evicted; want %d held, %d evicted", n.held, m.Len(), n.evicted, c.held, c.evicted)
			}
			// The live ones that went are those that end soonest.
			for i := range share {
				_, ok := get(m, "k"+strconv.Itoa(i), now)
				if want := i >= c.ended+c.evicted; ok != want {
					t.Errorf("k%d held %v, want %v", i, ok, want)
				}
			}
			if v, ok := get(m, "new", now); !ok || v != -1 {
				t.Errorf("the new key: %d, %v; want held", v, ok)
			}
		})
	}
}

// A bound below eight keys a shard holds too: an eighth of it is less
// than one key, yet a new key that finds the shard full still makes room
// for itself. Ten live keys in a map of four keep four.
func TestSmallBoundsHold(t *testing.T) {
	for bound := 1; bound <= 9; bound++ {
		var n counter
		m := New[int](bound, n.changed)
		for i := range bound + 6 {
			put(m, "k"+strconv.Itoa(i), i, time.Hour, time.Duration(i)) // all live
			if held := m.Len(); held > bound || int(n.held) != held {
				t.Fatalf("New(%d), after %d live keys: %d held (%d by the count); want at most %d", bound, i+1, held, n.held, bound)
			}
		}
		if _, ok := get(m, "k"+strconv.Itoa(bound+5), 0); !ok {
			t.Errorf("New(%d): the newest key is not held", bound)
		}
	}
}

// Looking up and changing a key held allocates nothing.
func TestHeldKeysAllocateNothing(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	m := New[[4]int64](100, nil)
	key := []byte("tenant")
	put := func() {
		s := m.Lock(key)
		s.Put(key, time.Hour, 0)[0]++
		if _, ok := s.Get(key, time.Second); !ok {
			t.Fatal("the key is gone")
		}
		s.Unlock()
	}
	put()
	if n := testing.AllocsPerRun(100, put); n != 0 {
		t.Errorf("%.1f allocations a put and get, want none", n)
	}
}

package lease

import (
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// A key turns hot once HotUnits of cost come within one Tick; units of
// an earlier tick do not count.
func TestGate(t *testing.T) {
	tab := NewTable[int]()
	key := []byte("rl:acme")
	for i := range HotUnits - 1 {
		if tab.Hot(key, 1, int64(i)) != nil {
			t.Fatalf("hot after %d units", i+1)
		}
	}
	if tab.Hot(key, 1, int64(Tick)) != nil { // the next tick: starts again
		t.Fatal("hot from units of two ticks")
	}
	if tab.Hot(key, HotUnits, int64(Tick)+1) == nil {
		t.Fatal("not hot after HotUnits in one tick")
	}
	if tab.Lookup(key) == nil {
		t.Fatal("the hot key has no entry")
	}
}

// fixed is a fixed window of limit per minute.
func fixed(limit int64) []window.Limit {
	return []window.Limit{{Limit: limit, Window: time.Minute, Kind: store.FixedWindow}}
}

// claimed has e claim and get a block of size at now, a fixed window that
// counted n in all and has left to run.
func claimed(t *testing.T, e *Entry[int], now, size, n int64, left time.Duration, ls []window.Limit) Step {
	t.Helper()
	st := e.Next(now, 1, ls, true)
	if st.Claim == 0 {
		t.Fatalf("Next = %+v; want a claim", st)
	}
	res := store.Result{Allowed: true, Counts: make([]store.Count, 1)}
	res.Counts[0] = store.Count{N: n, Fits: true, Left: left, Length: time.Minute, Mark: now + int64(left)}
	return e.Claimed(now, size, 1, ls, &res, 0, 0)
}

// A fixed window's block: spent until the window ends, each decision
// reporting the store's count less what the block still holds; a request
// that finds a claim in flight waits for it; a block's last units, fewer
// than a cost, are held for a request the store is asked the rest of.
func TestWindowBlock(t *testing.T) {
	tab := NewTable[int]()
	var expired int64
	tab.Expired = func(n int64) { expired += n }
	e := tab.add([]byte("k"), 1, 0)
	ls := fixed(1000)
	st := claimed(t, e, 0, 10, 15, 30*time.Second, ls) // 5 counted before, 10 now
	if !st.Spent || st.Counts[0].N != 6 {
		t.Fatalf("the claimant: %+v; want spent, 6 counted as this replica sees it", st)
	}
	for i := range 9 {
		st, ok, _ := e.Spend(int64(i), 1, ls)
		if !ok || st.Counts[0].N != int64(7+i) {
			t.Fatalf("spend %d: %v %+v; want spent, %d counted", i, ok, st, 7+i)
		}
	}
	if _, ok, held := e.Spend(10, 1, ls); ok || held != 0 {
		t.Fatal("spent past the block")
	}
	st = e.Next(10, 1, ls, true)
	if st.Claim == 0 {
		t.Fatalf("Next = %+v; want a claim", st)
	}
	if w := e.Next(10, 1, ls, true); w.Wait == nil {
		t.Fatalf("Next during a claim = %+v; want to wait for it", w)
	}
	res := store.Result{Allowed: true, Counts: make([]store.Count, 1)}
	res.Counts[0] = store.Count{N: 40, Fits: true, Left: time.Second, Length: time.Minute, Mark: 10 + int64(time.Second)}
	e.Claimed(10, 3, 1, ls, &res, 0, 0)
	if held, _ := e.Hold(10, 5); held != 2 {
		t.Fatalf("Hold for a cost of 5 = %d; want the block's last 2", held)
	}
	if _, ok, _ := e.Spend(int64(time.Second)+10, 1, ls); ok {
		t.Fatal("spent after the window ended")
	}
	if expired != 0 {
		t.Fatalf("expired %d; want none: every unit was spent or held", expired)
	}
}

// A block stops being spent slack before its window ends as the store
// said: a store that counts in whole milliseconds (Redis) may end the
// window up to one sooner.
func TestBlockEndsSlackBeforeItsWindow(t *testing.T) {
	const left, slack = 30 * time.Second, time.Millisecond
	ls := fixed(1000)
	for _, c := range []struct {
		at    time.Duration // after the claim
		spent bool
	}{
		{0, true},
		{left - slack - 1, true},
		{left - slack, false},
		{left - slack/2, false},
		{left - 1, false},
	} {
		e := NewTable[int]().add([]byte("k"), 1, 0)
		if st := e.Next(0, 1, ls, true); st.Claim == 0 {
			t.Fatalf("Next = %+v; want a claim", st)
		}
		res := store.Result{Allowed: true, Counts: make([]store.Count, 1)}
		res.Counts[0] = store.Count{N: 10, Fits: true, Left: left, Length: time.Minute, Mark: int64(left)}
		if st := e.Claimed(0, 10, 1, ls, &res, slack, 0); !st.Spent {
			t.Fatalf("the claimant: %+v; want spent", st)
		}
		if _, ok, _ := e.Spend(int64(c.at), 1, ls); ok != c.spent {
			t.Errorf("a spend %v after the claim, the window %v from its end: spent %v, want %v", c.at, left-c.at, ok, c.spent)
		}
	}
}

// What is left of a live block is carried into the next only when the
// store counted the next in the same windows: when the tenant's window
// changed under it (a Reset on another replica, and the store started a
// window anew), the old block's units were counted in a window that is
// gone, and they expire.
func TestBlockCarriesOverOnlyInItsWindows(t *testing.T) {
	ls := fixed(1000)
	for _, c := range []struct {
		name    string
		mark    int64 // of the second claim's window
		carried int64
	}{
		{"the same window", int64(30 * time.Second), 3},
		{"a window started anew", 1 + int64(time.Minute), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tab := NewTable[int]()
			var expired int64
			tab.Expired = func(n int64) { expired += n }
			e := tab.add([]byte("k"), 1, 0)
			claimed(t, e, 0, 10, 10, 30*time.Second, ls) // the claimant spends 1
			for range 6 {
				if _, ok, _ := e.Spend(1, 1, ls); !ok {
					t.Fatal("could not spend from the block")
				}
			}
			st := e.Next(1, 5, ls, true) // 3 left: too few for a cost of 5
			if st.Claim <= 5 {
				t.Fatalf("Next for a cost of 5 with 3 left = %+v; want a claim", st)
			}
			res := store.Result{Allowed: true, Counts: make([]store.Count, 1)}
			res.Counts[0] = store.Count{N: st.Claim, Fits: true, Left: 30 * time.Second, Length: time.Minute, Mark: c.mark}
			if st := e.Claimed(1, st.Claim, 5, ls, &res, 0, 0); !st.Spent {
				t.Fatalf("the second claimant: %+v; want spent", st)
			}
			if got, want := e.b.left(1), st.Claim+c.carried-5; got != want || expired != 3-c.carried {
				t.Fatalf("the new block holds %d, %d expired; want %d (the claim of %d, %d carried, less the claimant's 5), %d expired",
					got, expired, want, st.Claim, c.carried, 3-c.carried)
			}
		})
	}
}

// A token bucket's block: unit k is spent before t0 + k × interval, the
// arrival time it reserved; units whose time has passed are lost.
func TestBucketBlock(t *testing.T) {
	tab := NewTable[int]()
	var expired int64
	tab.Expired = func(n int64) { expired += n }
	e := tab.add([]byte("k"), 1, 0)
	ls := []window.Limit{{Limit: 10, Window: time.Second, Kind: store.TokenBucket, Burst: 100}} // a unit each 100 ms
	if st := e.Next(0, 1, ls, true); st.Claim == 0 {
		t.Fatalf("Next = %+v; want a claim", st)
	}
	res := store.Result{Allowed: true, Counts: make([]store.Count, 1)}
	res.Counts[0] = store.Count{N: 10, Fits: true, Left: time.Second, Length: 10 * time.Second} // full before: full again in 10 × 100 ms
	if st := e.Claimed(0, 10, 1, ls, &res, 0, 0); !st.Spent {
		t.Fatalf("the claimant: %+v; want spent", st)
	}
	const ms = int64(time.Millisecond)
	// At 250 ms units 0 to 2 have passed (unit 0 was the claimant's):
	// units 3 to 9 are left.
	if _, ok, _ := e.Spend(250*ms, 8, ls); ok {
		t.Fatal("spent 8 units at 250 ms; only 7 are left")
	}
	if _, ok, _ := e.Spend(250*ms, 7, ls); !ok {
		t.Fatal("could not spend the 7 units left at 250 ms")
	}
	if _, ok, held := e.Spend(250*ms, 1, ls); ok || held != 0 {
		t.Fatal("spent past the block")
	}
	e.mu.Lock()
	e.ended(250*ms, 0)
	e.mu.Unlock()
	if expired != 2 {
		t.Fatalf("expired %d; want the 2 units passed over", expired)
	}
}

// A store that marks a window a little differently each answer still
// names the same window; the next window, a length away, is another.
func TestSameWindow(t *testing.T) {
	st := store.Count{Length: time.Minute, Mark: int64(time.Hour)}
	for _, c := range []struct {
		mark int64
		same bool
	}{
		{int64(time.Hour), true},
		{int64(time.Hour + 3*time.Millisecond), true},
		{int64(time.Hour - 3*time.Millisecond), true},
		{int64(time.Hour + time.Minute), false},
		{int64(time.Hour - time.Minute), false},
	} {
		if got := sameWindow(&st, c.mark); got != c.same {
			t.Errorf("sameWindow(%v) = %v; want %v", time.Duration(c.mark), got, c.same)
		}
	}
}

// A block is what the key spends here in a Horizon (or a sixteenth of its
// shortest window), at most a quarter of what the store last said was
// left.
func TestSize(t *testing.T) {
	e := &Entry[int]{}
	e.rate.perNs = 1e-3 // a million a second: 20,000 in a Horizon
	if got := e.size(0, fixed(1_000_000)); got != 20_000 {
		t.Errorf("size = %d; want 20,000", got)
	}
	if got := e.size(0, fixed(40_000)); got != 10_000 {
		t.Errorf("size = %d; want a quarter of 40,000", got)
	}
	short := []window.Limit{{Limit: 1 << 40, Window: 160 * time.Millisecond, Kind: store.FixedWindow}}
	if got := e.size(0, short); got != 10_000 {
		t.Errorf("size = %d; want 10 ms of requests, a sixteenth of a 160 ms window", got)
	}
	e.known[0] = store.Count{N: 999_960, Left: time.Second, Length: time.Minute}
	e.knownAt, e.knowing = 0, true
	if got := e.size(int64(time.Millisecond), fixed(1_000_000)); got != 10 {
		t.Errorf("size = %d; want a quarter of the 40 left", got)
	}
}

// A key's rate is measured over its first tick, then over five; a quiet
// spell is not averaged in: the rate before it stands until a tick after
// the key comes back.
func TestRate(t *testing.T) {
	var r rate
	r.start(0)
	const ms = int64(time.Millisecond)
	for i := range int64(10) {
		r.add(i*ms, 100) // 100 a millisecond
	}
	r.add(10*ms, 100)
	if r.perNs != 1100.0/float64(10*ms) {
		t.Fatalf("after the first tick: %v a ns; want 1,100 in 10 ms", r.perNs)
	}
	before := r.perNs
	r.add(2000*ms, 1) // back after two quiet seconds
	if r.perNs != before {
		t.Fatalf("after a quiet spell: %v a ns; want the rate before it, %v", r.perNs, before)
	}
	r.add(2011*ms, 1)
	if want := 2.0 / float64(11*ms); r.perNs != want {
		t.Fatalf("a tick after: %v a ns; want %v, measured since the key came back", r.perNs, want)
	}
}

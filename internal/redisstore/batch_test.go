package redisstore

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/goroutines"
)

// fakeStore is a batcher's send that keeps counts in a map and records
// every round trip. While hold is set, each round trip waits for a value
// on it before answering.
type fakeStore struct {
	mu     sync.Mutex
	counts map[string]int64
	trips  [][]takeOp // copies of the ops of each round trip, as sent
	hold   chan struct{}
	sent   chan struct{} // when set, told of each round trip as it starts
	inside int           // round trips under way
	most   int           // the most round trips at once
}

func (f *fakeStore) send(_ context.Context, _ context.CancelFunc, ops []*takeOp) {
	f.mu.Lock()
	trip := make([]takeOp, len(ops))
	for i, op := range ops {
		trip[i] = *op
	}
	f.trips = append(f.trips, trip)
	f.inside++
	f.most = max(f.most, f.inside)
	hold, sent := f.hold, f.sent
	f.mu.Unlock()
	if sent != nil {
		sent <- struct{}{}
	}
	if hold != nil {
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inside--
	if f.counts == nil {
		f.counts = map[string]int64{}
	}
	for _, op := range ops {
		op.a, op.prev, op.res = op.ms, 0, nil
		for c := range op.costs() {
			count := f.counts[op.key]
			if count+c > op.limit {
				op.res = append(op.res, -count-1)
				continue
			}
			f.counts[op.key] = count + c
			op.res = append(op.res, count+c)
		}
	}
}

// incrIn is a call of b as RedisCounter.Incr makes it: cost 1, no
// limit. It returns the count and the op's a.
func incrIn(b *batcher, ctx context.Context, key string, ms int64, deadline time.Time, wait time.Duration) (int64, int64, error) {
	op, rank, err := b.take(ctx, opKey{key: key, ms: ms, limit: math.MaxInt64}, 1, deadline, wait)
	if err != nil {
		return 0, 0, err
	}
	return op.res[rank], op.a, nil
}

// total is what op adds to its key when every caller that stayed fits.
func (op *takeOp) total() int64 {
	var n int64
	for c := range op.costs() {
		n += c
	}
	return n
}

func (f *fakeStore) tripsNow() [][]takeOp {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.trips)
}

// waitFor polls until cond holds, for at most a few seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// pendingCallers reports how many callers wait in the filling batch.
func (b *batcher) pendingCallers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.filling == nil {
		return 0
	}
	return b.filling.waiting
}

// heldBatcher returns a batcher with one round trip in flight, held until
// store.hold is closed, so that the calls that follow fill the next batch.
// wg waits for the held call.
func heldBatcher() (store *fakeStore, b *batcher, wg *sync.WaitGroup) {
	store = &fakeStore{hold: make(chan struct{}), sent: make(chan struct{}, 10)}
	b = &batcher{send: store.send, rounds: 1}
	wg = &sync.WaitGroup{}
	wg.Go(func() { incrIn(b, context.Background(), "rl:first", 1000, time.Time{}, 0) })
	<-store.sent
	return store, b, wg
}

func TestBatcherSendsALoneCallAtOnce(t *testing.T) {
	store := &fakeStore{}
	b := &batcher{send: store.send, rounds: 4}
	for i := range int64(3) {
		n, ttl, err := incrIn(b, context.Background(), "rl:a", 1000, time.Time{}, 0)
		if err != nil || n != i+1 || ttl != 1000 {
			t.Fatalf("call %d = %d, %d, %v; want %d, 1000, nil", i, n, ttl, err, i+1)
		}
	}
	if trips := store.tripsNow(); len(trips) != 3 {
		t.Fatalf("%d round trips for 3 calls one after another, want 3: %v", len(trips), trips)
	}
}

// Calls that arrive while every round trip is in flight share the next:
// one op per key, whose callers each get a count of their own.
func TestBatcherCoalescesCallsToOneKey(t *testing.T) {
	before := goroutines.Now()
	store := &fakeStore{hold: make(chan struct{}), sent: make(chan struct{}, 10)}
	b := &batcher{send: store.send, rounds: 1}

	var wg sync.WaitGroup
	got := map[string][]int64{}
	var mu sync.Mutex
	call := func(key string) {
		wg.Go(func() {
			n, _, err := incrIn(b, context.Background(), key, 1000, time.Time{}, 0)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got[key] = append(got[key], n)
			mu.Unlock()
		})
	}
	call("rl:a") // the first round trip, held
	<-store.sent
	for range 5 {
		call("rl:a")
	}
	for range 3 {
		call("rl:b")
	}
	waitFor(t, "8 callers in the filling batch", func() bool { return b.pendingCallers() == 8 })
	close(store.hold)
	wg.Wait()

	trips := store.tripsNow()
	incs := map[string]int64{}
	if len(trips) == 2 {
		for _, op := range trips[1] {
			incs[op.key] += op.total()
		}
	}
	if len(trips) != 2 || len(trips[1]) != 2 || incs["rl:a"] != 5 || incs["rl:b"] != 3 {
		t.Fatalf("round trips %+v; want the lone first call, then one op adding 5 to rl:a and one adding 3 to rl:b", trips)
	}
	for key, want := range map[string][]int64{"rl:a": {1, 2, 3, 4, 5, 6}, "rl:b": {1, 2, 3}} {
		slices.Sort(got[key])
		if !slices.Equal(got[key], want) {
			t.Errorf("counts for %s = %v, want %v: each caller its own", key, got[key], want)
		}
	}
	goroutines.NoneLeft(t, before)
}

func TestBatcherKeepsToItsRounds(t *testing.T) {
	store := &fakeStore{hold: make(chan struct{})}
	b := &batcher{send: store.send, rounds: 3} // late 0: every round trip is late
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { incrIn(b, context.Background(), "rl:"+string(rune('a'+i%26)), 1000, time.Time{}, 0) })
	}
	waitFor(t, "3 round trips in flight", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.inside == 3
	})
	close(store.hold)
	wg.Wait()
	if store.most != 3 {
		t.Errorf("at most %d round trips at once, want 3", store.most)
	}
	var calls int64
	for _, trip := range store.tripsNow() {
		for _, op := range trip {
			calls += op.total()
		}
	}
	if calls != 50 {
		t.Errorf("the round trips counted %d calls, want 50: each exactly once", calls)
	}
}

// A round trip in flight holds the next batch back until it is late: then
// the next batch goes out beside it, up to rounds.
func TestBatcherSendsBesideALateRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		late   time.Duration
		inside int // round trips in flight once the second call has come
	}{
		{"the round trip in flight is not late", time.Hour, 1},
		{"the round trip in flight is late", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &fakeStore{hold: make(chan struct{}), sent: make(chan struct{}, 10)}
			b := &batcher{send: store.send, rounds: 4, late: tc.late}
			var wg sync.WaitGroup
			wg.Go(func() { incrIn(b, context.Background(), "rl:first", 1000, time.Time{}, 0) })
			<-store.sent
			wg.Go(func() { incrIn(b, context.Background(), "rl:second", 1000, time.Time{}, 0) })
			if tc.inside == 2 {
				<-store.sent
			} else {
				waitFor(t, "the second call waiting in the next batch", func() bool { return b.pendingCallers() == 1 })
			}
			store.mu.Lock()
			inside := store.inside
			store.mu.Unlock()
			close(store.hold)
			wg.Wait()
			if inside != tc.inside {
				t.Errorf("%d round trips in flight after the second call, want %d", inside, tc.inside)
			}
			if trips := len(store.tripsNow()); trips != 2 {
				t.Errorf("%d round trips in all, want 2", trips)
			}
		})
	}
}

// goid is the calling goroutine's ID.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// With a store that bounds a round trip by its deadline, a lone caller
// makes the round trip on its own goroutine: no hop to another one, which
// costs a lone request's latency. A caller without a deadline does not.
func TestBatcherInlineRoundTrip(t *testing.T) {
	var sender string
	store := &fakeStore{}
	b := &batcher{rounds: 4, inline: true, send: func(ctx context.Context, cancel context.CancelFunc, ops []*takeOp) {
		sender = goid()
		store.send(ctx, cancel, ops)
	}}
	const wait = time.Second
	if n, _, err := incrIn(b, context.Background(), "rl:a", 1000, time.Now().Add(wait), wait); err != nil || n != 1 {
		t.Fatalf("incr = %d, %v; want 1, nil", n, err)
	}
	if me := goid(); sender != me {
		t.Errorf("the round trip ran on goroutine %s, the caller is %s", sender, me)
	}
	if _, _, err := incrIn(b, context.Background(), "rl:a", 1000, time.Time{}, 0); err != nil {
		t.Fatal(err)
	}
	if sender == goid() {
		t.Error("a call without a deadline made its round trip on its own goroutine, which nothing would bound")
	}
}

// The callers of one failed round trip get one sharedFailure, which the
// breaker counts once; the next round trip's failure is another.
func TestBatcherFailureIsSharedByItsRoundTrip(t *testing.T) {
	store := &fakeStore{hold: make(chan struct{}), sent: make(chan struct{}, 10)}
	failing := errors.New("EOF")
	b := &batcher{rounds: 1, send: func(ctx context.Context, cancel context.CancelFunc, ops []*takeOp) {
		store.send(ctx, cancel, ops)
		for _, op := range ops {
			op.err = failing
		}
	}}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() { _, _, errs[0] = incrIn(b, context.Background(), "rl:first", 1000, time.Time{}, 0) })
	<-store.sent
	for i := 1; i < len(errs); i++ {
		key := []string{"rl:a", "rl:a", "rl:b"}[i-1]
		wg.Go(func() { _, _, errs[i] = incrIn(b, context.Background(), key, 1000, time.Time{}, 0) })
	}
	waitFor(t, "3 callers in the next batch", func() bool { return b.pendingCallers() == 3 })
	close(store.hold)
	wg.Wait()

	trips := make([]uint64, len(errs))
	for i, err := range errs {
		f, ok := errors.AsType[*tripError](err)
		if !ok || !errors.Is(err, failing) {
			t.Fatalf("caller %d: %v (%T), want a sharedFailure wrapping %v", i, err, err, failing)
		}
		trips[i] = f.RoundTrip()
	}
	if trips[0] == trips[1] || trips[1] != trips[2] || trips[2] != trips[3] {
		t.Fatalf("round trips of the failures: %v; want the first apart and the next three one", trips)
	}
}

// Callers of one key in one round trip are decided one by one in the order
// they came, each with its own cost: a refused one spends nothing, so a
// cheaper one after it may pass.
func TestBatcherDecidesEachCallerInOrder(t *testing.T) {
	store, b, wg := heldBatcher()
	k := opKey{key: "rl:a", ms: 1000, limit: 10}
	costs := []int64{4, 4, 4, 1, 1, 1}
	res := make([]int64, len(costs))
	for i, c := range costs {
		wg.Go(func() {
			if op, rank, err := b.take(context.Background(), k, c, time.Time{}, 0); err == nil {
				res[i] = op.res[rank]
			}
		})
		waitFor(t, "the caller to join", func() bool { return b.pendingCallers() == i+1 })
	}
	close(store.hold)
	wg.Wait()
	if want := []int64{4, 8, -9, 9, 10, -11}; !slices.Equal(res, want) {
		t.Fatalf("results %v, want %v: allowed, allowed, refused at 8, allowed, allowed, refused at 10", res, want)
	}
	if trips := store.tripsNow(); len(trips) != 2 || len(trips[1]) != 1 || trips[1][0].n != 6 {
		t.Fatalf("round trips %+v; want one op of the six callers", trips)
	}
}

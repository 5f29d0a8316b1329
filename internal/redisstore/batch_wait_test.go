// Tests of the batcher's callers that leave or run short of time: withdrawn
// from their batch, or waiting to their own deadlines.

package redisstore

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/goroutines"
)

// A caller whose wait ends before its batch leaves is taken out of it: it
// is not counted, and the callers that stay still get counts of their own.
func TestBatcherWithdrawsACallerThatLeavesBeforeTheSend(t *testing.T) {
	store := &fakeStore{hold: make(chan struct{}), sent: make(chan struct{}, 10)}
	b := &batcher{send: store.send, rounds: 1}

	var wg sync.WaitGroup
	wg.Go(func() { incrIn(b, context.Background(), "rl:first", 1000, time.Time{}, 0) })
	<-store.sent

	// Three callers of rl:a; the second leaves early.
	results := make([]int64, 3)
	errs := make([]error, 3)
	ctxs := make([]context.Context, 3)
	cancels := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		defer cancels[i]()
		wg.Go(func() { results[i], _, errs[i] = incrIn(b, ctxs[i], "rl:a", 1000, time.Time{}, 0) })
		waitFor(t, "the caller to join", func() bool { return b.pendingCallers() == i+1 })
	}
	cancels[1]()
	waitFor(t, "the caller to leave", func() bool { return b.pendingCallers() == 2 })
	close(store.hold)
	wg.Wait()

	if !errors.Is(errs[1], context.Canceled) {
		t.Errorf("the caller that left got %v, want context.Canceled", errs[1])
	}
	if errs[0] != nil || errs[2] != nil || results[0] != 1 || results[2] != 2 {
		t.Errorf("the callers that stayed got %v, %v and %v, %v; want 1 and 2", results[0], errs[0], results[2], errs[2])
	}
	if trips := store.tripsNow(); len(trips) != 2 || len(trips[1]) != 1 || trips[1][0].total() != 2 {
		t.Fatalf("round trips %+v; want the second to add 2 to rl:a", trips)
	}
}

// A batch whose callers all left is never sent; the batcher's goroutine
// ends once nothing waits.
func TestBatcherDropsABatchEveryoneLeft(t *testing.T) {
	before := goroutines.Now()
	store, b, wg := heldBatcher()

	start := time.Now()
	_, _, err := incrIn(b, context.Background(), "rl:a", 1000, start.Add(20*time.Millisecond), 20*time.Millisecond)
	if !errors.Is(err, errTimedOut) {
		t.Fatalf("a caller whose wait ended got %v, want errTimedOut", err)
	}
	close(store.hold)
	wg.Wait()
	if trips := store.tripsNow(); len(trips) != 1 {
		t.Fatalf("%d round trips, want 1: the abandoned batch must not be sent", len(trips))
	}
	goroutines.NoneLeft(t, before)
}

// A caller that joined a batch after its first caller waits on to its own
// deadline, past the batch's timer.
func TestBatcherLateJoinerWaitsItsOwnTime(t *testing.T) {
	store, b, wg := heldBatcher()

	const wait = 50 * time.Millisecond
	now := time.Now()
	var firstErr error
	wg.Go(func() { _, _, firstErr = incrIn(b, context.Background(), "rl:a", 1000, now.Add(wait), wait) })
	waitFor(t, "the first caller to join", func() bool { return b.pendingCallers() == 1 })
	// The second caller's deadline is 200ms past the first's.
	n, _, err := func() (int64, int64, error) {
		time.AfterFunc(wait+100*time.Millisecond, func() { close(store.hold) })
		return incrIn(b, context.Background(), "rl:b", 1000, now.Add(wait+200*time.Millisecond), wait+200*time.Millisecond)
	}()
	wg.Wait()
	if !errors.Is(firstErr, errTimedOut) {
		t.Errorf("first caller: %v, want errTimedOut", firstErr)
	}
	if err != nil || n != 1 {
		t.Errorf("late joiner = %d, %v; want 1: its deadline had not come when the store answered", n, err)
	}
}

// A caller with no wait of its own (RedisCounter.Incr with a context that
// has no deadline) waits for its answer even in a batch whose first caller
// ran out of time.
func TestBatcherCallerWithoutWaitIgnoresTheBatchTimer(t *testing.T) {
	store, b, wg := heldBatcher()

	const wait = 20 * time.Millisecond
	wg.Go(func() { incrIn(b, context.Background(), "rl:a", 1000, time.Now().Add(wait), wait) })
	waitFor(t, "the timed caller to join", func() bool { return b.pendingCallers() == 1 })
	time.AfterFunc(5*wait, func() { close(store.hold) })
	n, _, err := incrIn(b, context.Background(), "rl:b", 1000, time.Time{}, 0)
	wg.Wait()
	if err != nil || n != 1 {
		t.Fatalf("a caller without a wait = %d, %v; want 1, nil", n, err)
	}
}

// A caller that joins a batch after the batch's timer fired waits its own
// time, not that time counted from the timer.
func TestBatcherJoinerAfterTheTimerWaitsItsOwnTime(t *testing.T) {
	store, b, wg := heldBatcher()
	defer func() { close(store.hold); wg.Wait() }()

	const first = 20 * time.Millisecond
	if _, _, err := incrIn(b, context.Background(), "rl:a", 1000, time.Now().Add(first), first); !errors.Is(err, errTimedOut) {
		t.Fatalf("first caller: %v, want errTimedOut", err)
	}
	time.Sleep(200 * time.Millisecond) // the batch's timer is long over

	const wait = 50 * time.Millisecond
	start := time.Now()
	_, _, err := incrIn(b, context.Background(), "rl:b", 1000, start.Add(wait), wait)
	if d := time.Since(start); !errors.Is(err, errTimedOut) || d < wait || d > 4*wait {
		t.Errorf("a caller joining late: %v after %v; want errTimedOut after about %v", err, d, wait)
	}
}

// A caller whose context is done never joins a round trip, though none is
// in flight and its own would leave at once; one that leaves after its
// batch was started but before it was sent is withdrawn from it.
func TestBatcherSendsNothingForACallerAlreadyGone(t *testing.T) {
	store := &fakeStore{}
	b := &batcher{send: store.send, rounds: 4}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		if _, _, err := incrIn(b, ctx, "rl:a", 1000, time.Time{}, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller whose context was canceled got %v, want context.Canceled", err)
		}
	}
	waitFor(t, "no round trip in flight", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight == 0
	})
	if trips := store.tripsNow(); len(trips) != 0 {
		t.Fatalf("%d round trips, want none", len(trips))
	}

	// Started, so no other call joins it, but not yet sent: flush marks a
	// batch sent as it reads it.
	bt, pos, ord, start := b.join(context.Background(), opKey{key: "rl:a", ms: 1000, limit: math.MaxInt64}, 1, time.Time{}, 0, false)
	if !start {
		t.Fatal("the lone call was not told to start its round trip")
	}
	if b.leave(bt, pos, ord) {
		t.Fatal("leave reports an answer before anything was sent")
	}
	b.flush(bt)
	if trips := store.tripsNow(); len(trips) != 0 {
		t.Fatalf("%d round trips, want none: the batch's only caller left before it was sent", len(trips))
	}
}

package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// holdNth is a MemoryCounter that holds its nth Take, once entered, until
// open is closed: a request on its way to the store while others pass.
type holdNth struct {
	*MemoryCounter
	n       int
	calls   int
	mu      sync.Mutex
	entered chan struct{}
	open    chan struct{}
}

func (h *holdNth) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	h.mu.Lock()
	h.calls++
	held := h.calls == h.n
	h.mu.Unlock()
	if held {
		close(h.entered)
		<-h.open
	}
	return h.MemoryCounter.Take(ctx, r, res)
}

// A request the store refuses because a block was claimed while it was
// on its way is decided from that block: the units this replica holds
// are the tenant's, and a refusal beside them would leave them to expire
// with nobody to spend them. Limit 9: seven requests decided by the
// store (the first before the tenant can be hot), the eighth held on its
// way there, the ninth (hot now) claims the last two units and spends
// one; the eighth, refused by the store, spends the other.
func TestLeasesARefusalSpendsTheBlockClaimedMeanwhile(t *testing.T) {
	heldRefusalSpendsTheBlock(t, 8, 9)
}

// A request sent before the store's first answer, when no tenant can be
// hot yet, is decided from the block that its tenant claimed meanwhile
// when the store refuses it. Limit 10: the first request held on its way
// to the store, the second's answer says that the store decides, seven
// more decided by the store make the tenant hot, the tenth claims the
// last two units and spends one; the first, refused by the store, spends
// the other. (Before, such a request took the store's refusal as it was:
// CI's 49 of 50 at once.)
func TestLeasesARefusalBeforeTheStoresFirstAnswerSpendsTheBlock(t *testing.T) {
	heldRefusalSpendsTheBlock(t, 1, 10)
}

// heldRefusalSpendsTheBlock has a lease store take limit requests of one
// tenant, the held-th of them held on its way to the store until the
// others are decided, the last of which claims the last units as a block
// and spends one: the held request, which the store then refuses, must
// be decided from the block, and a request past the limit refused.
func heldRefusalSpendsTheBlock(t *testing.T, held, limit int) {
	clock := newFakeClock()
	h := &holdNth{MemoryCounter: newMemoryCounter(clock.Now), n: held, entered: make(chan struct{}), open: make(chan struct{})}
	s := newLeaseStore(h, nil, clock.Now, time.Second)
	take := leaseTaker(t, s, clock, int64(limit))
	for i := 1; i < held; i++ {
		if a := take(); !a.Allowed {
			t.Fatalf("request %d: refused; want allowed", i)
		}
	}
	heldAnswer := make(chan *store.Result)
	go func() { heldAnswer <- take() }()
	<-h.entered
	for i := held + 1; i <= limit; i++ {
		if a := take(); !a.Allowed {
			t.Fatalf("request %d: refused; want allowed", i)
		}
	}
	if e := s.table.Lookup([]byte("rl:t")); e == nil {
		t.Fatalf("no hot entry after %d requests: the test no longer makes the tenant hot", limit)
	}
	close(h.open)
	if a := <-heldAnswer; !a.Allowed {
		t.Fatalf("request %d, refused by the store while this replica holds a unit of the tenant's: %+v; want it decided from the block", held, a)
	}
	if a := take(); a.Allowed {
		t.Fatalf("request %d at a limit of %d: allowed", limit+1, limit)
	}
}

// holdGive is a MemoryCounter whose first Give, once entered, waits until
// open is closed: units of an idle block on their way back to the store.
// refused is closed when it refuses a Take meanwhile; with landFirst, that
// Take then lets the units reach the store, and answers once landed
// returns true: the give-back has ended before the refusal is heard.
type holdGive struct {
	*MemoryCounter
	once, refusal sync.Once
	entered       chan struct{}
	open          chan struct{}
	refused       chan struct{}
	landFirst     bool
	landed        func() bool
}

func (h *holdGive) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	err := h.MemoryCounter.Take(ctx, r, res)
	select {
	case <-h.entered:
		if err == nil && !res.Allowed {
			h.refusal.Do(func() {
				close(h.refused)
				if h.landFirst {
					close(h.open)
					for !h.landed() {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
	default:
	}
	return err
}

func (h *holdGive) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	held := false
	h.once.Do(func() { held = true })
	if held {
		close(h.entered)
		<-h.open
	}
	return h.MemoryCounter.Give(ctx, r, marks)
}

// A request the store refuses while an idle block's units are on their
// way back to it asks the store again once they are there: the units are
// the tenant's, and the refusal counted them. Limit 10: eight requests
// decided by the store, the ninth claims the last two units and spends
// one; the block goes idle and gives the other back, held on its way;
// the tenth request, refused meanwhile, is then allowed.
func TestLeasesARefusalWaitsForAnIdleBlocksGiveBack(t *testing.T) {
	refusedBesideAGiveBack(t, false)
}

// The same when the units reach the store, and the give-back ends,
// before the refusal is heard: the request asks again all the same.
// (Before, it looked for a give-back still in flight only, and CI's
// scheduler once let the give-back end first.)
func TestLeasesARefusalHeardAfterAGiveBackEndedAsksAgain(t *testing.T) {
	refusedBesideAGiveBack(t, true)
}

// refusedBesideAGiveBack has the tenth request of a tenant at a limit of
// 10 refused by the store while the ninth's idle block gives a unit back;
// landFirst: the give-back ends before the refusal comes back.
func refusedBesideAGiveBack(t *testing.T, landFirst bool) {
	clock := newFakeClock()
	h := &holdGive{MemoryCounter: newMemoryCounter(clock.Now), entered: make(chan struct{}), open: make(chan struct{}), refused: make(chan struct{}), landFirst: landFirst}
	s := newLeaseStore(h, nil, clock.Now, time.Second)
	h.landed = func() bool { e := s.table.Lookup([]byte("rl:t")); return e != nil && e.Gives() > 0 }
	take := leaseTaker(t, s, clock, 10)
	for i := range 9 {
		if a := take(); !a.Allowed {
			t.Fatalf("request %d: refused; want allowed", i+1)
		}
	}
	select {
	case <-h.entered: // the block went idle (lease.IdleAfter, twice) and gives its unit back
	case <-time.After(10 * time.Second):
		t.Fatal("the block of the ninth request was not given back in 10 s: the test no longer makes the tenant hot")
	}
	tenth := make(chan *store.Result)
	go func() { tenth <- take() }()
	<-h.refused // by the store, which counts the unit on its way back
	if !landFirst {
		close(h.open)
	}
	if a := <-tenth; !a.Allowed {
		t.Fatalf("the tenth request, refused while the unit was on its way back: %+v; want it allowed by the store, asked again", a)
	}
	if a := take(); a.Allowed {
		t.Fatal("an eleventh request at a limit of 10: allowed")
	}
}

// leaseTaker returns a function that Takes from s, at clock's time, a
// request of tenant "t" (key "rl:t") at a cost of 1 and a limit of limit
// a minute. It may be called from any goroutine.
func leaseTaker(t *testing.T, s store.Store, clock *fakeClock, limit int64) func() *store.Result {
	b := &store.Budget{Prefix: "rl:", Name: "default", Algorithm: store.FixedWindow, Limit: limit, Window: time.Minute}
	return func() *store.Result {
		r := store.Request{Budget: b, Key: []byte("rl:t"), Tenant: "t", Cost: 1, Now: clock.Now()}
		res := &store.Result{Counts: make([]store.Count, 1+len(b.Quotas))}
		if err := s.Take(context.Background(), &r, res); err != nil {
			t.Errorf("Take: %v", err)
		}
		return res
	}
}

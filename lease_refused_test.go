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

func (h *holdNth) Take(ctx context.Context, r Request) (Answer, error) {
	h.mu.Lock()
	h.calls++
	held := h.calls == h.n
	h.mu.Unlock()
	if held {
		close(h.entered)
		<-h.open
	}
	return h.MemoryCounter.Take(ctx, r)
}

// A request the store refuses because a block was claimed while it was
// on its way is decided from that block: the units this replica holds
// are the tenant's, and a refusal beside them would leave them to expire
// with nobody to spend them. Limit 9: seven requests decided by the
// store (the first before the tenant can be hot), the eighth held on its
// way there, the ninth (hot now) claims the last two units and spends
// one; the eighth, refused by the store, spends the other.
func TestLeasesARefusalSpendsTheBlockClaimedMeanwhile(t *testing.T) {
	clock := newFakeClock()
	h := &holdNth{MemoryCounter: newMemoryCounter(clock.Now), n: 8, entered: make(chan struct{}), open: make(chan struct{})}
	s := newLeaseStore(h, nil, clock.Now, time.Second)
	take := leaseTaker(t, s, clock, 9)
	for i := range 7 {
		if a := take(); !a.Allowed {
			t.Fatalf("request %d: refused; want allowed", i+1)
		}
	}
	eighth := make(chan Answer)
	go func() { eighth <- take() }()
	<-h.entered
	if a := take(); !a.Allowed {
		t.Fatal("the ninth request, which claims a block: refused")
	}
	if st := s.table.Lookup([]byte("rl:t")); st == nil {
		t.Fatal("no hot entry after nine requests at once: the test no longer makes the tenant hot")
	}
	close(h.open)
	if a := <-eighth; !a.Allowed {
		t.Fatalf("the eighth request, refused by the store while this replica holds a unit of the tenant's: %+v; want it decided from the block", a)
	}
	if a := take(); a.Allowed {
		t.Fatal("a tenth request at a limit of 9: allowed")
	}
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
	clock := newFakeClock()
	h := &holdNth{MemoryCounter: newMemoryCounter(clock.Now), n: 1, entered: make(chan struct{}), open: make(chan struct{})}
	s := newLeaseStore(h, nil, clock.Now, time.Second)
	take := leaseTaker(t, s, clock, 10)
	first := make(chan Answer)
	go func() { first <- take() }()
	<-h.entered
	for i := range 9 {
		if a := take(); !a.Allowed {
			t.Fatalf("request %d: refused; want allowed", i+2)
		}
	}
	if e := s.table.Lookup([]byte("rl:t")); e == nil {
		t.Fatal("no hot entry after ten requests: the test no longer makes the tenant hot")
	}
	close(h.open)
	if a := <-first; !a.Allowed {
		t.Fatalf("the first request, refused by the store while this replica holds a unit of the tenant's: %+v; want it decided from the block", a)
	}
	if a := take(); a.Allowed {
		t.Fatal("an eleventh request at a limit of 10: allowed")
	}
}

// holdGive is a MemoryCounter whose first Give, once entered, waits until
// open is closed: units of an idle block on their way back to the store.
// refused is closed when it refuses a Take meanwhile.
type holdGive struct {
	*MemoryCounter
	once, refusal sync.Once
	entered       chan struct{}
	open          chan struct{}
	refused       chan struct{}
}

func (h *holdGive) Take(ctx context.Context, r Request) (Answer, error) {
	a, err := h.MemoryCounter.Take(ctx, r)
	select {
	case <-h.entered:
		if err == nil && !a.Allowed {
			h.refusal.Do(func() { close(h.refused) })
		}
	default:
	}
	return a, err
}

func (h *holdGive) Give(ctx context.Context, r Request, marks store.Marks) error {
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
	clock := newFakeClock()
	h := &holdGive{MemoryCounter: newMemoryCounter(clock.Now), entered: make(chan struct{}), open: make(chan struct{}), refused: make(chan struct{})}
	s := newLeaseStore(h, nil, clock.Now, time.Second)
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
	tenth := make(chan Answer)
	go func() { tenth <- take() }()
	<-h.refused // by the store, which counts the unit on its way back
	close(h.open)
	if a := <-tenth; !a.Allowed {
		t.Fatalf("the tenth request, refused while the unit was on its way back: %+v; want it allowed by the store, asked again", a)
	}
	if a := take(); a.Allowed {
		t.Fatal("an eleventh request at a limit of 10: allowed")
	}
}

// leaseTaker returns a function that Takes from s, at clock's time, a
// request of tenant "t" at a cost of 1 and a limit of limit a minute. It
// may be called from any goroutine.
func leaseTaker(t *testing.T, s Store, clock *fakeClock, limit int64) func() Answer {
	r := Request{Tenant: "t", Name: "default", Algorithm: FixedWindow, Cost: 1, Limit: limit, Window: time.Minute}
	return func() Answer {
		r := r
		r.Now = clock.Now()
		a, err := s.Take(context.Background(), r)
		if err != nil {
			t.Errorf("Take: %v", err)
		}
		return a
	}
}

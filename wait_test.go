package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Limit 10 a second, Burst 1: 60 callers of Wait at once, spread over
// three replicas, on one tenant, are all allowed, each in a turn of its
// own: no two start within 95 ms of each other, as the callers measure it,
// and the last about 6 s after the first. On the real clock: each subject
// takes those 6 s, side by side with the others. A caller's sleep can end
// late on a busy machine (make test-servers runs packages side by side),
// which brings the next caller's start nearer: a gap under 95 ms is
// excused by as much lateness of the caller before it, which that caller
// measures against its turn (when it called, plus the time its Decision
// said the bucket is full again, less the burst's tenth of a second).
func TestWaitSpacesCallersAcrossReplicas(t *testing.T) {
	for _, s := range takeSubjects[:3] { // memory, single node, cluster
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			var lims []*Limiter
			var mem store.Store
			for range 3 {
				c, clock := s.counter(t)
				if clock != nil { // memory: one counter, on the real clock
					if mem == nil {
						mem = NewMemoryCounter()
					}
					c = mem
				}
				lims = append(lims, NewLimiter(Options{Counter: c, Limit: 10, Window: time.Second, Burst: 1,
					Algorithm: TokenBucket, StoreTimeout: 5 * time.Second}))
			}
			tenant := uniqueTenant(t)
			type start struct{ at, late time.Duration }
			var mu sync.Mutex
			var starts []start
			epoch := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, 60)
			for i := range 60 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					called := time.Since(epoch)
					d, err := lims[i%3].Wait(ctx, tenant)
					at := time.Since(epoch)
					if err != nil || !d.Allowed || d.By != ByCounter {
						errs <- errors.Join(err, errors.New("decision: "+d.By.String()))
						return
					}
					mu.Lock()
					// Its turn came no earlier than called + Reset − 100 ms.
					starts = append(starts, start{at, max(at-(called+d.Reset-100*time.Millisecond), 0)})
					mu.Unlock()
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("a caller was not allowed: %v", err)
			}
			if len(starts) != 60 {
				t.Fatalf("%d callers started; want 60", len(starts))
			}
			slices.SortFunc(starts, func(a, b start) int { return cmp.Compare(a.at, b.at) })
			var late time.Duration
			for i := 1; i < len(starts); i++ {
				late = max(late, starts[i-1].late)
				if gap := starts[i].at - starts[i-1].at; gap+starts[i-1].late < 95*time.Millisecond {
					t.Fatalf("callers %d and %d started %v apart, the first %v late; want at least 95 ms at 10 a second",
						i, i+1, gap, starts[i-1].late)
				}
			}
			t.Logf("a caller started at most %v after its turn", late)
			if span := starts[59].at - starts[0].at; span < 5800*time.Millisecond || span > 7*time.Second {
				t.Fatalf("the last caller started %v after the first; want about 5.9 s", span)
			}
		})
	}
}

// A turn that would come after the context's deadline is refused at once,
// and spends nothing; a context that ends while its caller sleeps gives
// the turn back.
func TestWaitDeadlineAndCancel(t *testing.T) {
	ctx := context.Background()
	lim := NewLimiter(Options{Limit: 1, Window: time.Second, Algorithm: TokenBucket})
	if _, err := lim.Wait(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	d, err := lim.Wait(short, "a")
	if err == nil || d.Allowed || !strings.Contains(err.Error(), "past the context's deadline") || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("a turn a second away, with 100 ms to wait: %+v, %v after %v; want refused at once, saying why", d, err, time.Since(start))
	}
	if d.RetryAfter < 800*time.Millisecond || d.RetryAfter > time.Second {
		t.Errorf("RetryAfter %v; want the time until the turn, about 1 s", d.RetryAfter)
	}
	if u, _ := lim.Usage(ctx, "a"); u[0].Reset < 800*time.Millisecond || u[0].Reset > time.Second {
		t.Fatalf("after the refusal the bucket is full in %v; want about 1 s: nothing spent", u[0].Reset)
	}

	canceled, stop := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, stop)
	start = time.Now()
	d, err = lim.Wait(canceled, "a")
	if !errors.Is(err, context.Canceled) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("a Wait canceled while it sleeps: %+v, %v after %v; want context.Canceled at once", d, err, time.Since(start))
	}
	if u, _ := lim.Usage(ctx, "a"); u[0].Reset > time.Second {
		t.Fatalf("after the canceled Wait the bucket is full in %v; want within 1 s: its turn given back", u[0].Reset)
	}
}

// In shadow mode Wait decides as Take does: it reserves no turn and
// never sleeps, and lets through, shadowed, what it would refuse. Limit 1
// a second, Burst 1, on a fake clock: after three shadowed waits the
// bucket is full again a second after the first request, as if they had
// not come.
func TestWaitInShadowModeNeverWaits(t *testing.T) {
	clock := newFakeClock()
	lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: 1, Window: time.Second, Algorithm: TokenBucket, Shadow: true,
		Logger: newLogRecorder().logger()}, clock.Now)
	var slept time.Duration
	lim.sleepFor = func(_ context.Context, d time.Duration) error { slept += d; clock.Advance(d); return nil }
	ctx := context.Background()
	if d, err := lim.Wait(ctx, "a"); err != nil || !d.Allowed || d.Shadowed {
		t.Fatalf("the first: %+v, %v; want allowed", d, err)
	}
	for i := range 3 {
		if d, err := lim.Wait(ctx, "a"); err != nil || !d.Allowed || !d.Shadowed {
			t.Fatalf("wait %d with the bucket empty: %+v, %v; want let through, shadowed", i+2, d, err)
		}
	}
	if slept != 0 {
		t.Fatalf("the waits slept %v; want none: shadow mode never waits", slept)
	}
	clock.Advance(time.Second)
	if d := lim.Take(ctx, "a"); !d.Allowed || d.Shadowed {
		t.Fatalf("a second after the first: %+v; want allowed, not shadowed: the shadowed waits reserved nothing", d)
	}
}

// A waiter that gives up gives its turn back once: the Decision it
// returns holds nothing more, so that a Release of it after (as a caller
// that releases every Decision does) gives back nothing. Limit 1 a
// second, Burst 1, on a fake clock: the first caller's unit stays spent.
func TestWaitThatGaveUpHoldsNothing(t *testing.T) {
	clock := newFakeClock()
	lim := newLimiter(Options{Counter: newMemoryCounter(clock.Now), Limit: 1, Window: time.Second, Algorithm: TokenBucket,
		Logger: newLogRecorder().logger()}, clock.Now)
	ctx := context.Background()
	if d := lim.Take(ctx, "a"); !d.Allowed {
		t.Fatalf("the first: %+v; want allowed", d)
	}
	lim.sleepFor = func(context.Context, time.Duration) error { return context.Canceled } // it gives up as it sleeps
	d, err := lim.Wait(ctx, "a")
	if !errors.Is(err, context.Canceled) || d.Allowed {
		t.Fatalf("a Wait that gave up: %+v, %v; want refused, context.Canceled", d, err)
	}
	if err := lim.Release(ctx, d); err != nil {
		t.Fatalf("Release of the Decision it returned: %v", err)
	}
	if d := lim.Take(ctx, "a"); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("after the waiter gave up and its Decision was released: allowed %v, retry after %v; want refused: the first caller's unit is still spent", d.Allowed, d.RetryAfter)
	}
}

// Wait needs a token bucket; a cost above the burst never fits; a store
// failure lets no call through, whatever FailClosed says: Wait returns at
// once an error that wraps the store's, and once the breaker is open, one
// that wraps the failure that opened it.
func TestWaitRefusals(t *testing.T) {
	ctx := context.Background()
	if _, err := NewLimiter(Options{Limit: 1, Window: time.Second}).Wait(ctx, "a"); err == nil || !strings.Contains(err.Error(), "TokenBucket") {
		t.Errorf("Wait on a fixed window: %v; want an error naming TokenBucket", err)
	}
	lim := NewLimiter(Options{Limit: 10, Window: time.Second, Burst: 2, Algorithm: TokenBucket})
	if d, err := lim.WaitN(ctx, "a", 3); err == nil || d.Allowed || !strings.Contains(err.Error(), "never fits") {
		t.Errorf("WaitN of 3 at burst 2: %+v, %v; want an error saying it never fits", d, err)
	}
	refused := errors.New("connection refused")
	for _, closed := range []bool{false, true} {
		m := &Metrics{}
		rec := newLogRecorder()
		lim := NewLimiter(Options{Limit: 1, Window: time.Hour, Algorithm: TokenBucket, Counter: scriptedStore{&scripted{err: refused}},
			FailClosed: closed, BreakerFailures: 2, Metrics: m, Logger: rec.logger()})
		for i := range 4 { // the last two turned away by the open breaker
			start := time.Now()
			d, err := lim.Wait(ctx, "a")
			if d.By != ByNone || d.Allowed || !errors.Is(err, refused) || time.Since(start) > 500*time.Millisecond {
				t.Errorf("FailClosed %v, the store down, Wait %d: %+v, %v after %v; want refused at once, the error wrapping the store's",
					closed, i+1, d, err, time.Since(start))
			}
		}
		if s := m.Snapshot(); s.FailedClosed != 4 || s.FailedOpen != 0 {
			t.Errorf("FailClosed %v: %+v; want 4 failed closed, none open", closed, s.Decisions)
		}
		if lines := rec.withMsg("ratelimit: counter failed, request decided by fail closed"); len(lines) == 0 {
			t.Errorf("FailClosed %v: log %v; want the failure logged as failing closed", closed, rec.lines())
		}
	}
}

// With a Fallback, a Wait while the store fails waits for its turn in the
// fallback's bucket, at FallbackLimit's share of the rate and of the
// burst; a turn past the context's deadline is refused at once, the error
// wrapping the store's.
func TestWaitOnTheFallbacksBucket(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Advance(time.Since(clock.Now())) // the real time: a context's deadline is on it
	refused := errors.New("connection refused")
	lim := newLimiter(Options{Limit: 10, Window: time.Second, Burst: 4, Algorithm: TokenBucket, Counter: scriptedStore{&scripted{err: refused}},
		Fallback: newMemoryCounter(clock.Now), FallbackLimit: 2, Logger: newLogRecorder().logger()}, clock.Now)
	lim.sleepFor = func(_ context.Context, d time.Duration) error { clock.Advance(d); return nil }
	start := clock.Now()
	for i := range 5 {
		d, err := lim.Wait(ctx, "a")
		// 2 a second, a burst of 1 (4 × 2/10, rounded up): a turn each 500 ms.
		if at, want := clock.Now().Sub(start), time.Duration(i)*500*time.Millisecond; err != nil || d.By != ByFallback || (at-want).Abs() > time.Millisecond {
			t.Fatalf("Wait %d: %+v, %v at %v; want its turn by the fallback at %v", i+1, d, err, at, want)
		}
	}
	// The clock is 2 s ahead of the real one now, so the context ends 2 s
	// after the limiter sees it end.
	short, cancel := context.WithDeadline(ctx, clock.Now().Add(200*time.Millisecond))
	defer cancel()
	if d, err := lim.Wait(short, "a"); err == nil || d.Allowed || !errors.Is(err, refused) || !strings.Contains(err.Error(), "past the context's deadline") {
		t.Errorf("a turn 500 ms away with 200 ms to wait: %+v, %v; want refused, the error wrapping the store's", d, err)
	}
}

// switchStore is a MemoryCounter that is not local, as Redis is not (the
// limiter keeps its breaker, its memory of usage and its reserved turns
// for it), and that fails while down (its Give also while giveDown, when
// set), as a server that refuses connections does.
type switchStore struct {
	*MemoryCounter
	down, giveDown *atomic.Bool
	refusedGives   *atomic.Int64 // counts the Gives refused, when set
}

var errSwitchedOff = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func (s switchStore) Attach(b *store.Budget, plans bool) (store.Info, error) {
	_, err := s.MemoryCounter.Attach(b, plans)
	return store.Info{Features: store.All}, err
}

func (s switchStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if s.down.Load() {
		return errSwitchedOff
	}
	return s.MemoryCounter.Take(ctx, r, res)
}

func (s switchStore) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	if s.down.Load() || s.giveDown != nil && s.giveDown.Load() {
		if s.refusedGives != nil {
			s.refusedGives.Add(1)
		}
		return errSwitchedOff
	}
	return s.MemoryCounter.Give(ctx, r, marks)
}

// When the store fails, the turns this replica reserved on it and has not
// started count in the fallback's bucket, once: they start at their time
// all the same, and a fresh fallback bucket beside them would let as many
// more through. Turns that started before the failure count no more.
func TestWaitCountsReservedTurnsInTheFallback(t *testing.T) {
	for _, c := range []struct {
		name         string
		startedFirst bool
		sleeps       []time.Duration // the fallback's Waits' (one that need not wait sleeps not at all)
	}{
		// The three turns to come take the fallback's next 600 ms.
		{"turns to come", false, []time.Duration{600 * time.Millisecond, 800 * time.Millisecond, time.Second}},
		// The first fallback turn is at once, from a full bucket.
		{"turns started", true, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newFakeClock()
			down := &atomic.Bool{}
			// 10 a second, a burst of 1; the fallback's share 5 a second, a
			// burst of 1.
			lim := newLimiter(Options{Limit: 10, Window: time.Second, Burst: 1, Algorithm: TokenBucket,
				Counter: switchStore{newMemoryCounter(clock.Now), down, nil, nil}, Fallback: newMemoryCounter(clock.Now), FallbackLimit: 5,
				Logger: newLogRecorder().logger()}, clock.Now)
			var mu sync.Mutex
			var sleeps []time.Duration
			gate := make(chan struct{})
			lim.sleepFor = func(_ context.Context, d time.Duration) error {
				mu.Lock()
				sleeps = append(sleeps, d)
				mu.Unlock()
				<-gate
				return nil
			}
			var wg sync.WaitGroup
			for range 4 { // turns now, in 100, 200 and 300 ms: three reserved
				wg.Go(func() {
					if _, err := lim.Wait(ctx, "a"); err != nil {
						t.Error(err)
					}
				})
			}
			for reserved := 0; reserved < 3; {
				time.Sleep(time.Millisecond)
				mu.Lock()
				reserved = len(sleeps)
				mu.Unlock()
			}
			if c.startedFirst {
				close(gate)
				wg.Wait()
			}
			down.Store(true)
			var got []time.Duration
			lim.sleepFor = func(_ context.Context, d time.Duration) error { got = append(got, d); return nil }
			for i := range 3 {
				if d, err := lim.Wait(ctx, "a"); err != nil || d.By != ByFallback {
					t.Fatalf("Wait %d with the store down: %+v, %v; want its turn by the fallback", i+1, d, err)
				}
			}
			if !c.startedFirst {
				close(gate)
				wg.Wait()
			}
			ok := len(got) == len(c.sleeps)
			for i := 0; ok && i < len(got); i++ {
				ok = (got[i] - c.sleeps[i]).Abs() <= time.Millisecond
			}
			if !ok {
				t.Errorf("the fallback's turns in %v; want %v", got, c.sleeps)
			}
		})
	}
}

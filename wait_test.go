package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
			var mem Counter
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

// Wait needs a token bucket; a store failure is decided as Take decides
// it, without waiting; a cost above the burst never fits.
func TestWaitRefusals(t *testing.T) {
	ctx := context.Background()
	if _, err := NewLimiter(Options{Limit: 1, Window: time.Second}).Wait(ctx, "a"); err == nil || !strings.Contains(err.Error(), "TokenBucket") {
		t.Errorf("Wait on a fixed window: %v; want an error naming TokenBucket", err)
	}
	lim := NewLimiter(Options{Limit: 10, Window: time.Second, Burst: 2, Algorithm: TokenBucket})
	if d, err := lim.WaitN(ctx, "a", 3); err == nil || d.Allowed || !strings.Contains(err.Error(), "never fits") {
		t.Errorf("WaitN of 3 at burst 2: %+v, %v; want an error saying it never fits", d, err)
	}
	down := scriptedStore{&scripted{err: errors.New("connection refused")}}
	for _, closed := range []bool{false, true} {
		lim := NewLimiter(Options{Limit: 1, Window: time.Hour, Algorithm: TokenBucket, Counter: down, FailClosed: closed,
			Logger: newLogRecorder().logger()})
		start := time.Now()
		d, err := lim.Wait(ctx, "a")
		if d.By != ByNone || d.Allowed == closed || (err != nil) != closed || time.Since(start) > 500*time.Millisecond {
			t.Errorf("FailClosed %v, the store down: %+v, %v; want decided by the fail policy at once", closed, d, err)
		}
	}
}

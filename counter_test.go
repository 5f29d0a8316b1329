package ratelimit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/fakeclock"

	"github.com/gatewaykit/ratelimit/internal/testkit/goroutines"
)

// counterSubject is one Counter under the conformance table.
type counterSubject struct {
	counter Counter
	// advance moves the counter's clock forward by d: a fake clock for
	// MemoryCounter, a real sleep for a store with a clock of its own.
	advance func(d time.Duration)
}

var keySeq atomic.Int64

// uniqueKey returns a key no other test uses, so that tests can share one
// store (a Redis server) without seeing each other's counts.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("rl:test:%s:%d:%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

// testCounterConformance runs the table that every Counter passes. subject
// returns a fresh subject for each case.
func testCounterConformance(t *testing.T, subject func(t *testing.T) counterSubject) {
	ctx := context.Background()

	t.Run("counts from one", func(t *testing.T) {
		c := subject(t).counter
		key := uniqueKey(t)
		for want := int64(1); want <= 3; want++ {
			got, err := c.Incr(ctx, key, time.Minute)
			if err != nil {
				t.Fatalf("Incr #%d: %v", want, err)
			}
			if got != want {
				t.Fatalf("Incr #%d = %d, want %d", want, got, want)
			}
		}
	})

	t.Run("keys are independent", func(t *testing.T) {
		c := subject(t).counter
		a, b := uniqueKey(t), uniqueKey(t)
		for _, step := range []struct {
			key  string
			want int64
		}{{a, 1}, {a, 2}, {b, 1}, {a, 3}, {b, 2}} {
			got, err := c.Incr(ctx, step.key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got != step.want {
				t.Fatalf("Incr(%s) = %d, want %d", step.key, got, step.want)
			}
		}
	})

	t.Run("count restarts after the window", func(t *testing.T) {
		s := subject(t)
		key := uniqueKey(t)
		const window = 150 * time.Millisecond
		for want := int64(1); want <= 2; want++ {
			if got, err := s.counter.Incr(ctx, key, window); err != nil || got != want {
				t.Fatalf("Incr = %d, %v; want %d", got, err, want)
			}
		}
		// The window started at the first Incr and does not move with
		// later ones.
		s.advance(window / 2)
		if got, err := s.counter.Incr(ctx, key, window); err != nil || got != 3 {
			t.Fatalf("Incr half way through = %d, %v; want 3", got, err)
		}
		s.advance(window/2 + 20*time.Millisecond)
		if got, err := s.counter.Incr(ctx, key, window); err != nil || got != 1 {
			t.Fatalf("Incr after the window = %d, %v; want 1", got, err)
		}
		if got, err := s.counter.Incr(ctx, key, window); err != nil || got != 2 {
			t.Fatalf("second Incr of the new window = %d, %v; want 2", got, err)
		}
	})

	t.Run("rejects a window that is not positive", func(t *testing.T) {
		c := subject(t).counter
		for _, w := range []time.Duration{0, -time.Second} {
			if n, err := c.Incr(ctx, uniqueKey(t), w); err == nil {
				t.Errorf("Incr with window %v = %d, nil; want an error", w, n)
			}
		}
	})

	t.Run("a huge window never restarts the count", func(t *testing.T) {
		// Any positive window is one to keep: an error would say that the
		// store failed, which it has not, and a window cut short would
		// restart the count early.
		s := subject(t)
		key := uniqueKey(t)
		const window = time.Duration(math.MaxInt64)
		for want := int64(1); want <= 4; want++ {
			if got, err := s.counter.Incr(ctx, key, window); err != nil || got != want {
				t.Fatalf("Incr #%d with a window of %v = %d, %v; want %d, nil", want, window, got, err, want)
			}
		}
	})

	t.Run("concurrent increments are each counted once", func(t *testing.T) {
		c := subject(t).counter
		key := uniqueKey(t)
		const goroutines, each = 16, 40
		got := make([]int64, 0, goroutines*each)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				mine := make([]int64, 0, each)
				for range each {
					n, err := c.Incr(ctx, key, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, n)
				}
				mu.Lock()
				got = append(got, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(got)
		if len(got) != goroutines*each {
			t.Fatalf("got %d counts, want %d", len(got), goroutines*each)
		}
		for i, n := range got {
			if n != int64(i+1) {
				t.Fatalf("sorted counts[%d] = %d, want %d: counts must be exactly 1..%d", i, n, i+1, goroutines*each)
			}
		}
	})
}

// fakeClock is a clock that moves only when told to.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New() }

// A MemoryCounter starts no goroutine: after each case of the table, with
// the counter still open and once it is closed, no goroutine is left that
// the case started. It passes at its default bound, and at the smallest
// one that holds every key a case counts at once.
func TestMemoryCounterConformance(t *testing.T) {
	for _, bound := range []struct {
		name string
		opts []MemoryOption
	}{{"default", nil}, {"MaxKeys(2)", []MemoryOption{MaxKeys(2)}}} {
		t.Run(bound.name, func(t *testing.T) {
			testCounterConformance(t, func(t *testing.T) counterSubject {
				before := goroutines.Now()
				clock := newFakeClock()
				m := newMemoryCounter(clock.Now, bound.opts...)
				t.Cleanup(func() {
					open := goroutines.NoneLeft(t, before)
					m.Close()
					if open {
						goroutines.NoneLeft(t, before)
					}
				})
				return counterSubject{counter: m, advance: clock.Advance}
			})
		})
	}
}

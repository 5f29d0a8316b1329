package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
)

// Two pools of workers, standing for two processes, on one counter keep
// together to the provider's rate: after the burst of 2, one call every
// 200 ms, whichever pool makes it.
func TestPoolsShareTheRate(t *testing.T) {
	counter := ratelimit.NewMemoryCounter()
	ctx := context.Background()
	noop := func(context.Context, int) error { return nil }
	var starts []time.Time
	a, b := run(ctx, newLimiter(counter), 3, 4, noop), run(ctx, newLimiter(counter), 3, 4, noop)
	for a != nil || b != nil {
		var c call
		var ok bool
		select {
		case c, ok = <-a:
			if !ok {
				a = nil
				continue
			}
		case c, ok = <-b:
			if !ok {
				b = nil
				continue
			}
		}
		if c.err != nil {
			t.Fatal(c.err)
		}
		starts = append(starts, c.at)
	}
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	if len(starts) != 8 {
		t.Fatalf("%d calls; want 8", len(starts))
	}
	for i := burst; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 190*time.Millisecond {
			t.Errorf("calls %d and %d went out %v apart; want 200 ms at %d a second", i, i+1, gap, rate)
		}
	}
}

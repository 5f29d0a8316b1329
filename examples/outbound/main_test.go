package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
)

// Two pools of workers, standing for two processes, on one counter keep
// together to the provider's rate: never more calls in any span than the
// burst of 2 and 5 a second allow, whichever pool makes them.
func TestPoolsShareTheRate(t *testing.T) {
	counter := ratelimit.NewMemoryCounter()
	ctx := context.Background()
	noop := func(context.Context, int) error { return nil }
	var starts []time.Time
	late := probeLateness()
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
	// A call goes out at its turn or later, never earlier: a late one
	// shortens the span from it to the next, by at most the lateness this
	// run measured beside the calls.
	slack := 10*time.Millisecond + late()
	for j := range starts {
		for i := j + burst; i < len(starts); i++ {
			n := i - j + 1 // calls j to i, which need n - burst turns of 200 ms
			want := time.Duration(n-burst) * time.Second / rate
			if span := starts[i].Sub(starts[j]); span < want-slack {
				t.Errorf("calls %d to %d went out within %v; want %v at least at %d a second after a burst of %d (slack %v)",
					j+1, i+1, span, want, rate, burst, slack)
			}
		}
	}
}

// probeLateness starts measuring how much later than asked a sleep of
// 5 ms wakes, and returns the function that stops it and reports the
// most: what the machine's load added to the time of anything meanwhile.
func probeLateness() func() time.Duration {
	stop := make(chan struct{})
	most := make(chan time.Duration)
	go func() {
		var m time.Duration
		for {
			select {
			case <-stop:
				most <- m
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(5 * time.Millisecond)
			m = max(m, time.Since(t0)-5*time.Millisecond)
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-most
	}
}

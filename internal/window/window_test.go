package window

import (
	"math"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The sliding window's arithmetic, step by step.
func TestSlidingArithmetic(t *testing.T) {
	const w = 10 * time.Second
	for _, tt := range []struct {
		name      string
		s         Slide
		estimate  float64
		remaining int64 // of a limit of 10
		fits3     bool  // a cost of 3
		until5    time.Duration
	}{
		{"empty", Slide{Length: w}, 0, 10, true, 0},
		{"current only", Slide{Cur: 6, Elapsed: 2 * time.Second, Length: w}, 6, 4, true,
			// 6 × (10s - e')/10s = 5 at e' = 10s/6, after the 8 s left.
			8*time.Second + 1666666667},
		{"the previous window, half in", Slide{Prev: 10, Cur: 2, Elapsed: 5 * time.Second, Length: w}, 7, 3, true,
			// 10 × (5s - d)/10s + 2 = 5 at d = 2 s.
			2 * time.Second},
		{"the previous window, just begun", Slide{Prev: 10, Elapsed: 0, Length: w}, 10, 0, false,
			5 * time.Second},
		{"over the limit after a downgrade", Slide{Prev: 20, Cur: 5, Elapsed: 9 * time.Second, Length: w}, 7, 3, true,
			// 20 × (1s - d)/10s + 5 = 5 at d = 1 s.
			time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if e := tt.s.Estimate(); math.Abs(e-tt.estimate) > 1e-9 {
				t.Errorf("estimate = %v, want %v", e, tt.estimate)
			}
			if r := tt.s.Remaining(10); r != tt.remaining {
				t.Errorf("remaining(10) = %d, want %d", r, tt.remaining)
			}
			if f := tt.s.Fits(3, 10); f != tt.fits3 {
				t.Errorf("fits(3, 10) = %v, want %v", f, tt.fits3)
			}
			if d := tt.s.Until(5); d != tt.until5 {
				t.Errorf("until(5) = %v, want %v", d, tt.until5)
			}
			// After until(5), the estimate is 5 or below, and not before.
			if d := tt.s.Until(5); tt.s.After(d).Estimate() > 5+1e-9 || d > 0 && tt.s.After(d-time.Millisecond).Estimate() <= 5 {
				t.Errorf("after %v the estimate is %v", d, tt.s.After(d).Estimate())
			}
		})
	}
	// after rolls the windows over.
	s := Slide{Prev: 4, Cur: 6, Elapsed: 8 * time.Second, Length: w}
	if got := s.After(3 * time.Second); got != (Slide{Prev: 6, Cur: 0, Elapsed: time.Second, Length: w}) {
		t.Errorf("a window later: %+v", got)
	}
	if got := s.After(13 * time.Second); got != (Slide{Prev: 0, Cur: 0, Elapsed: time.Second, Length: w}) {
		t.Errorf("two windows later: %+v", got)
	}
}

// A budget's limits are its main limit, then each quota in order: a
// quota with a Window counts in sliding windows beside a SlidingWindow,
// in fixed ones beside the others.
func TestLimits(t *testing.T) {
	qs := []store.Quota{{Name: "hour", Limit: 100, Window: time.Hour}, {Name: "day", Limit: 1000, Calendar: store.Day}}
	for _, tt := range []struct {
		algo store.Algorithm
		kind store.Algorithm // of the quota with a Window
	}{
		{store.FixedWindow, store.FixedWindow},
		{store.SlidingWindow, store.SlidingWindow},
		{store.TokenBucket, store.FixedWindow},
	} {
		b := &store.Budget{Name: "default", Algorithm: tt.algo, Limit: 10, Window: time.Minute, Burst: 4, Quotas: qs}
		ls, n := Limits(b)
		want := [MaxLimits]Limit{
			{Name: "default", Limit: 10, Window: time.Minute, Kind: tt.algo, Burst: 4},
			{Name: "hour", Limit: 100, Window: time.Hour, Kind: tt.kind},
			{Name: "day", Limit: 1000, Kind: tt.kind, Calendar: store.Day},
		}
		if n != 3 || ls != want {
			t.Errorf("%v: Limits = %+v, %d; want %+v, 3", tt.algo, ls, n, want)
		}
		if m := Main(b); m != want[0] {
			t.Errorf("%v: Main = %+v; want %+v", tt.algo, m, want[0])
		}
	}
	if ls, n := Limits(&store.Budget{Name: "default", Algorithm: store.InFlight, Limit: 3, Window: time.Second}); n != 1 ||
		ls[0] != (Limit{Name: "default", Limit: 3, Window: time.Second, Kind: store.InFlight}) {
		t.Errorf("a budget without quotas: Limits = %+v, %d; want its main limit alone", ls, n)
	}
}

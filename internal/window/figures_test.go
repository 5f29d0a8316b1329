package window

import (
	"math"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// What a response reports of a fixed window, a calendar period and slots
// in flight, from the store's state after the decision. A calendar quota
// beside a sliding main limit has Kind store.SlidingWindow: its period still counts
// as a fixed window does.
func TestFiguresOfCounts(t *testing.T) {
	const lease = 30 * time.Second
	month := 31 * 24 * time.Hour
	for _, tt := range []struct {
		name string
		l    Limit
		st   store.Count
		cost int64
		want Figures
	}{
		{"fixed, allowed",
			Limit{Limit: 10, Window: time.Minute},
			store.Count{N: 3, Fits: true, Left: 20 * time.Second, Length: time.Minute}, 1,
			Figures{Remaining: 7, Reset: 20 * time.Second}},
		{"fixed, allowed up to the limit",
			Limit{Limit: 10, Window: time.Minute},
			store.Count{N: 10, Fits: true, Left: time.Second, Length: time.Minute}, 4,
			Figures{Remaining: 0, Reset: time.Second}},
		{"fixed, refused",
			Limit{Limit: 10, Window: time.Minute},
			store.Count{N: 8, Fits: false, Left: 20 * time.Second, Length: time.Minute}, 3,
			Figures{Remaining: 2, Reset: 20 * time.Second, Retry: 20 * time.Second}},
		{"fixed, over the limit after a downgrade: never below 0",
			Limit{Limit: 10, Window: time.Minute},
			store.Count{N: 15, Fits: false, Left: 5 * time.Second, Length: time.Minute}, 1,
			Figures{Remaining: 0, Reset: 5 * time.Second, Retry: 5 * time.Second}},
		{"a month's quota, allowed",
			Limit{Limit: 1000, Calendar: store.Month},
			store.Count{N: 999, Fits: true, Left: 72 * time.Hour, Length: month}, 1,
			Figures{Remaining: 1, Reset: 72 * time.Hour}},
		{"a month's quota, refused",
			Limit{Limit: 1000, Calendar: store.Month},
			store.Count{N: 1000, Fits: false, Left: 72 * time.Hour, Length: month}, 1,
			Figures{Remaining: 0, Reset: 72 * time.Hour, Retry: 72 * time.Hour}},
		{"a day's quota beside a sliding window counts as a period",
			// Read as a sliding window (Prev 0, Elapsed 23 h of 24 h) the
			// estimate would be 90 and Remaining 10 too, but Reset would
			// be the time until the estimate falls to 89, 1 h + 16 min.
			Limit{Limit: 100, Kind: store.SlidingWindow, Calendar: store.Day},
			store.Count{N: 90, Fits: false, Left: time.Hour, Length: 24 * time.Hour}, 20,
			Figures{Remaining: 10, Reset: time.Hour, Retry: time.Hour}},
		{"in flight, allowed",
			Limit{Limit: 5, Window: lease, Kind: store.InFlight},
			store.Count{N: 4, Fits: true, Left: lease, Length: lease}, 1,
			Figures{Remaining: 1, Reset: Retry}},
		{"in flight, refused",
			Limit{Limit: 5, Window: lease, Kind: store.InFlight},
			store.Count{N: 5, Fits: false, Left: lease, Length: lease}, 1,
			Figures{Remaining: 0, Reset: Retry, Retry: Retry}},
		{"in flight, over the limit after a downgrade",
			Limit{Limit: 5, Window: lease, Kind: store.InFlight},
			store.Count{N: 7, Fits: false, Left: lease, Length: lease}, 2,
			Figures{Remaining: 0, Reset: Retry, Retry: Retry}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st
			if got := tt.l.Figures(&st, tt.cost); got != tt.want {
				t.Errorf("Figures = %+v, want %+v", got, tt.want)
			}
			if st != tt.st {
				t.Errorf("Figures changed the state: %+v, was %+v", st, tt.st)
			}
		})
	}
}

// What a response reports of a sliding window. Each figure is also
// checked against what it promises, by stepping the window on with
// Slide.After: after Reset one unit more than Remaining is left, after
// Retry the cost fits, and a nanosecond before either, not.
func TestFiguresOfSlidingWindow(t *testing.T) {
	const w = 10 * time.Second
	for _, tt := range []struct {
		name string
		st   store.Count // of a limit of 10 per 10 s
		cost int64
		want Figures
	}{
		{"one in the current window",
			store.Count{N: 1, Fits: true, Left: 6 * time.Second, Length: w}, 1,
			// 1 × (10s - e')/10s = 0 at the end of the next window.
			Figures{Remaining: 9, Reset: 16 * time.Second}},
		{"the previous window, half in, allowed",
			store.Count{N: 2, Prev: 10, Fits: true, Left: 5 * time.Second, Length: w}, 1,
			// Estimate 10 × 5/10 + 2 = 7; 10 × (5s - d)/10s + 2 = 6 at d = 1 s.
			Figures{Remaining: 3, Reset: time.Second}},
		{"the previous window, half in, refused",
			store.Count{N: 2, Prev: 10, Fits: false, Left: 5 * time.Second, Length: w}, 5,
			// A cost of 5 fits once the estimate is 5: at d = 2 s.
			Figures{Remaining: 3, Reset: time.Second, Retry: 2 * time.Second}},
		{"a fractional estimate: Remaining rounds down",
			store.Count{N: 3, Prev: 7, Fits: false, Left: 3 * time.Second, Length: w}, 5,
			// Estimate 7 × 3/10 + 3 = 5.1, so 4 left, not 4.9; it falls to
			// 5 at 7 × (3s - d)/10s + 3 = 5, d = 1/7 s, rounded up.
			Figures{Remaining: 4, Reset: time.Second/7 + 1, Retry: time.Second/7 + 1}},
		{"refused until the next window",
			store.Count{N: 10, Fits: false, Left: 6 * time.Second, Length: w}, 3,
			// 10 × (10s - e')/10s = 7 at e' = 3 s of the next window.
			Figures{Remaining: 0, Reset: 7 * time.Second, Retry: 9 * time.Second}},
		{"over the limit after a downgrade",
			store.Count{N: 12, Prev: 4, Fits: false, Left: 2 * time.Second, Length: w}, 1,
			// Estimate 4 × 2/10 + 12 = 12.8: 0 left, never below. It falls
			// to 9 at 12 × (10s - e')/10s = 9, e' = 2.5 s into the next window.
			Figures{Remaining: 0, Reset: 4500 * time.Millisecond, Retry: 4500 * time.Millisecond}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := Limit{Limit: 10, Window: w, Kind: store.SlidingWindow}
			st := tt.st
			got := l.Figures(&st, tt.cost)
			if got != tt.want {
				t.Errorf("Figures = %+v, want %+v", got, tt.want)
			}
			s := l.Slide(&st)
			if got.Remaining != max(int64(math.Floor(10-s.Estimate())), 0) {
				t.Errorf("Remaining %d, estimate %v", got.Remaining, s.Estimate())
			}
			if after := s.After(got.Reset).Remaining(10); after <= got.Remaining {
				t.Errorf("Reset %v: after it %d left, want more than %d", got.Reset, after, got.Remaining)
			}
			if before := s.After(got.Reset - 1).Remaining(10); got.Reset > 0 && before > got.Remaining {
				t.Errorf("Reset %v: a nanosecond before it %d left already", got.Reset, before)
			}
			if tt.st.Fits {
				if got.Retry != 0 {
					t.Errorf("allowed, yet Retry %v", got.Retry)
				}
				return
			}
			if !s.After(got.Retry).Fits(tt.cost, 10) {
				t.Errorf("Retry %v: the cost %d does not fit after it (estimate %v)", got.Retry, tt.cost, s.After(got.Retry).Estimate())
			}
			if s.After(got.Retry-1).Fits(tt.cost, 10) {
				t.Errorf("Retry %v: the cost %d fits a nanosecond before it", got.Retry, tt.cost)
			}
		})
	}
}

// Whether a cost fits, from the state before the request: a sliding
// window weighs in its previous window, a fixed window and a period do not.
func TestFits(t *testing.T) {
	// Prev 10 half in, Cur 2: an estimate of 7 for a sliding window.
	half := store.Count{N: 2, Prev: 10, Left: 5 * time.Second, Length: 10 * time.Second}
	for _, tt := range []struct {
		name string
		l    Limit
		st   store.Count
		cost int64
		want bool
	}{
		{"fixed, up to the limit", Limit{Limit: 10, Window: time.Minute}, store.Count{N: 7}, 3, true},
		{"fixed, one past it", Limit{Limit: 10, Window: time.Minute}, store.Count{N: 8}, 3, false},
		{"fixed, ignoring Prev", Limit{Limit: 10, Window: 10 * time.Second}, half, 8, true},
		{"sliding, up to the limit", Limit{Limit: 10, Window: 10 * time.Second, Kind: store.SlidingWindow}, half, 3, true},
		{"sliding, one past it", Limit{Limit: 10, Window: 10 * time.Second, Kind: store.SlidingWindow}, half, 4, false},
		{"sliding, empty", Limit{Limit: 10, Window: 10 * time.Second, Kind: store.SlidingWindow}, store.Count{Length: 10 * time.Second, Left: 10 * time.Second}, 10, true},
		{"a period beside a sliding window, ignoring Prev", Limit{Limit: 10, Kind: store.SlidingWindow, Calendar: store.Day}, half, 8, true},
		{"a period beside a sliding window, one past it", Limit{Limit: 10, Kind: store.SlidingWindow, Calendar: store.Day}, half, 9, false},
		{"in flight", Limit{Limit: 10, Window: time.Minute, Kind: store.InFlight}, store.Count{N: 9}, 2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.Fits(&tt.st, tt.cost); got != tt.want {
				t.Errorf("Fits(%+v, %d) = %v, want %v", tt.st, tt.cost, got, tt.want)
			}
		})
	}
}

// A state learned d ago, as the over-limit cache sees it now.
func TestAged(t *testing.T) {
	const w = 10 * time.Second
	fixed := Limit{Limit: 10, Window: time.Minute}
	day := Limit{Limit: 100, Calendar: store.Day}
	sliding := Limit{Limit: 10, Window: w, Kind: store.SlidingWindow}
	// 8 s into a sliding window, with 4 in the one before and 6 in it.
	slide := store.Count{N: 6, Prev: 4, Fits: true, Left: 2 * time.Second, Length: w}
	for _, tt := range []struct {
		name string
		l    Limit
		st   store.Count
		d    time.Duration
		want store.Count // once ended, what it holds means nothing
		live bool
	}{
		{"fixed, a moment later",
			fixed, store.Count{N: 5, Left: 20 * time.Second, Length: time.Minute}, 5 * time.Second,
			store.Count{N: 5, Left: 15 * time.Second, Length: time.Minute}, true},
		{"fixed, a nanosecond before its end",
			fixed, store.Count{N: 5, Left: 20 * time.Second, Length: time.Minute}, 20*time.Second - 1,
			store.Count{N: 5, Left: 1, Length: time.Minute}, true},
		{"fixed, at its end",
			fixed, store.Count{N: 5, Left: 20 * time.Second, Length: time.Minute}, 20 * time.Second,
			store.Count{}, false},
		{"fixed, long after its end",
			fixed, store.Count{N: 5, Left: 20 * time.Second, Length: time.Minute}, time.Hour,
			store.Count{}, false},
		{"fixed, nothing counted: no window runs",
			fixed, store.Count{N: 0, Left: time.Minute, Length: time.Minute}, time.Hour,
			store.Count{N: 0, Left: time.Minute, Length: time.Minute}, true},
		{"a day, a moment later",
			day, store.Count{N: 0, Left: time.Hour, Length: 24 * time.Hour}, 30 * time.Minute,
			store.Count{N: 0, Left: 30 * time.Minute, Length: 24 * time.Hour}, true},
		{"a day, at its end, nothing counted",
			day, store.Count{N: 0, Left: time.Hour, Length: 24 * time.Hour}, time.Hour,
			store.Count{}, false},
		{"a day, past its end",
			day, store.Count{N: 100, Left: time.Hour, Length: 24 * time.Hour}, 2 * time.Hour,
			store.Count{}, false},
		{"sliding, within its window",
			sliding, slide, time.Second,
			store.Count{N: 6, Prev: 4, Fits: true, Left: time.Second, Length: w}, true},
		{"sliding, in the next window",
			sliding, slide, 3 * time.Second,
			store.Count{N: 0, Prev: 6, Fits: true, Left: 9 * time.Second, Length: w}, true},
		{"sliding, exactly at the next window",
			sliding, slide, 2 * time.Second,
			store.Count{N: 0, Prev: 6, Fits: true, Left: w, Length: w}, true},
		{"sliding, in the window after the next",
			sliding, slide, 13 * time.Second,
			store.Count{N: 0, Prev: 0, Fits: true, Left: 9 * time.Second, Length: w}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, live := tt.l.Aged(tt.st, tt.d)
			if live != tt.live || live && got != tt.want {
				t.Errorf("Aged(%+v, %v) = %+v, %v; want %+v, %v", tt.st, tt.d, got, live, tt.want, tt.live)
			}
		})
	}
}

// Windows align on multiples of their length, on either side of 0.
func TestStart(t *testing.T) {
	minute := int64(time.Minute)
	before1970 := time.Date(1969, 12, 31, 23, 58, 30, 0, time.UTC).UnixNano()
	for _, tt := range []struct {
		name        string
		now, length int64
		want        int64
	}{
		{"0", 0, 10, 0},
		{"inside the first window", 7, 10, 0},
		{"on a start", 20, 10, 20},
		{"a nanosecond before a start", 19, 10, 10},
		{"a nanosecond before 0", -1, 10, -10},
		{"on a start before 0", -10, 10, -10},
		{"a nanosecond before a start before 0", -11, 10, -20},
		{"a minute, before 1970", before1970, minute, time.Date(1969, 12, 31, 23, 58, 0, 0, time.UTC).UnixNano()},
		{"a minute, in 2024",
			time.Date(2024, 2, 29, 12, 34, 56, 789, time.UTC).UnixNano(), minute,
			time.Date(2024, 2, 29, 12, 34, 0, 0, time.UTC).UnixNano()},
		{"the last window", math.MaxInt64, 10, math.MaxInt64 - 7},
		{"the first window, which began before the clock's first time", math.MinInt64, 10, math.MinInt64},
		{"the first whole window", math.MinInt64 + 9, 10, math.MinInt64 + 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Start(tt.now, tt.length); got != tt.want {
				t.Errorf("Start(%d, %d) = %d, want %d", tt.now, tt.length, got, tt.want)
			}
		})
	}
}

func TestCeilDiv(t *testing.T) {
	for _, tt := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Millisecond, 0},
		{1, time.Millisecond, 1},
		{time.Millisecond, time.Millisecond, 1},
		{time.Millisecond + 1, time.Millisecond, 2},
		{1500 * time.Millisecond, time.Second, 2},
		{time.Minute, time.Second, 60},
		{90 * time.Second, time.Second, 90},
		{math.MaxInt64, time.Second, int64(math.MaxInt64/time.Second) + 1},
		{-1500 * time.Millisecond, time.Second, -1}, // up is toward +∞
		// math.MaxInt64 ns is 9223372036854.775807 ms: no overflow.
		{math.MaxInt64, time.Millisecond, 9223372036855},
		{math.MaxInt64, 1, math.MaxInt64},
	} {
		if got := CeilDiv(tt.d, tt.unit); got != tt.want {
			t.Errorf("CeilDiv(%d, %d) = %d, want %d", tt.d, tt.unit, got, tt.want)
		}
	}
}

func TestAddClamped(t *testing.T) {
	for _, tt := range []struct{ a, b, want int64 }{
		{0, 0, 0},
		{1, 2, 3},
		{-5, 3, -2},
		{math.MaxInt64 - 1, 1, math.MaxInt64},
		{math.MaxInt64 - 1, 2, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 0, math.MaxInt64},
		{10, -3, 7}, // not a length, but no clamp either
		{time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), int64(time.Hour),
			time.Date(2024, 1, 1, 1, 0, 0, 0, time.UTC).UnixNano()},
	} {
		if got := AddClamped(tt.a, tt.b); got != tt.want {
			t.Errorf("AddClamped(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestCeilDuration(t *testing.T) {
	for _, tt := range []struct {
		d    float64
		want time.Duration
	}{
		{0, 0},
		{1, 1},
		{1.000001, 2},
		{1e9 / 3, 333333334},
		{math.MaxInt64, math.MaxInt64},
		{1e30, math.MaxInt64},
		{math.Inf(1), math.MaxInt64},
	} {
		if got := CeilDuration(tt.d); got != tt.want {
			t.Errorf("CeilDuration(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

// Package window is the arithmetic of the windows a limiter counts in:
// fixed windows, sliding windows, calendar periods and the leases of
// requests in flight. It holds no state and reads no clock: every function
// takes the time it is about as an argument, so that a test steps through
// time on a fake clock. The in-memory store decides with it, the limiter
// derives the figures of a response from what a store reports with it,
// and the Redis store's Lua mirrors it (a test runs both on the same
// inputs).
package window

import (
	"math"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// NoWindow is a mark (store.Count.Mark) that names no window: giving back or
// charging with it leaves the limit alone, a bucket too, whose own mark
// is 0. It is store.NoWindow.
const NoWindow = store.NoWindow

// Kind returns the window that quotas with a Window count in beside a
// main limit of algorithm a: sliding beside a SlidingWindow, fixed beside
// the others. It is 0 or 1, so it also indexes a pair of tables, one for
// each.
func Kind(a store.Algorithm) store.Algorithm {
	if a == store.SlidingWindow {
		return store.SlidingWindow
	}
	return store.FixedWindow
}

// MaxLimits is how many limits one request is decided against at most:
// the main one and four quotas.
const MaxLimits = 5

// Retry is what a refused request of an InFlight limit is told to wait,
// and its reset: a slot frees whenever a request of the tenant ends,
// which no one can foresee.
const Retry = time.Second

// A Limit is one limit a request is decided against: Limit units per
// Window, counted as Kind says, or per calendar period when Calendar is
// set. Name names it in a store's keys (the main limit's is the
// limiter's policy name).
type Limit struct {
	Name     string
	Limit    int64
	Window   time.Duration   // 0 for a calendar period
	Kind     store.Algorithm // FixedWindow or SlidingWindow for a window; InFlight: Window is the lease
	Calendar store.Calendar
	Burst    int64 // TokenBucket: the most it holds, at least 1
}

// Figures are what a response reports of one limit: the units left, how
// long until one more than that is available, and, for a refused request,
// until its cost would fit (0 when it never can).
type Figures struct {
	Remaining int64
	Reset     time.Duration
	Retry     time.Duration
}

// Figures derives the figures of l from st, the store's state after
// deciding a request of cost. This is the one place they are derived: a
// fixed window's and a calendar period's here, the others in figures.
func (l *Limit) Figures(st *store.Count, cost int64) Figures {
	if l.Kind == store.TokenBucket && l.Calendar == 0 {
		return l.bucketFigures(st, cost)
	}
	if l.Kind != store.FixedWindow && l.Calendar == 0 {
		return l.figures(st, cost)
	}
	f := Figures{Remaining: max(l.Limit-st.N, 0), Reset: st.Left}
	if !st.Fits {
		f.Retry = st.Left
	}
	return f
}

// figures is Figures for slots in flight or a sliding window.
func (l *Limit) figures(st *store.Count, cost int64) Figures {
	if l.Kind == store.InFlight {
		f := Figures{Remaining: max(l.Limit-st.N, 0), Reset: Retry}
		if !st.Fits {
			f.Retry = Retry
		}
		return f
	}
	s := l.Slide(st)
	f := Figures{Remaining: s.Remaining(l.Limit)}
	f.Reset = s.Until(float64(l.Limit - f.Remaining - 1))
	if !st.Fits {
		f.Retry = s.Until(float64(l.Limit - cost))
	}
	return f
}

// Slide is the sliding window of l that st reports, at the moment of the
// decision.
func (l *Limit) Slide(st *store.Count) Slide {
	return Slide{Prev: st.Prev, Cur: st.N, Elapsed: st.Length - st.Left, Length: st.Length}
}

// Fits reports whether cost fits in l, whose state is st before the
// request.
func (l *Limit) Fits(st *store.Count, cost int64) bool {
	if l.Kind == store.TokenBucket && l.Calendar == 0 {
		_, fits := l.Bucket().Take(float64(st.Left)/1e3, cost, 0)
		return fits
	}
	if l.Kind == store.SlidingWindow && l.Calendar == 0 {
		return l.Slide(st).Fits(cost, l.Limit)
	}
	return st.N+cost <= l.Limit
}

// Aged returns st, learned d ago, as it stands now if nothing was counted
// meanwhile, and false once the window or period it was in has ended (a
// sliding window rolls on instead). The over-limit cache refuses from it.
func (l *Limit) Aged(st store.Count, d time.Duration) (store.Count, bool) {
	if l.Kind == store.SlidingWindow && l.Calendar == 0 {
		s := l.Slide(&st).After(d)
		st.N, st.Prev, st.Left = s.Cur, s.Prev, s.Length-s.Elapsed
		return st, true
	}
	if l.Kind == store.TokenBucket && l.Calendar == 0 {
		// A bucket only fills: at its full time it is as new.
		st.Left = max(st.Left-d, 0)
		st.N = l.Bucket().Used(float64(st.Left) / 1e3)
		return st, true
	}
	if st.N == 0 && l.Calendar == 0 {
		// No window runs: a request would start one, of its full length.
		return st, true
	}
	st.Left -= d
	return st, st.Left > 0
}

// Slide is a sliding window at one moment: the counts of the previous
// window and of the current one, and how far the current one has run of
// its Length. The arithmetic below is the whole algorithm; the Redis
// script does the same in Lua.
type Slide struct {
	Prev, Cur int64
	Elapsed   time.Duration // into the current window, in [0, Length)
	Length    time.Duration
}

// Estimate is the requests counted in the last Length: the previous
// window's count weighted by the share of it still inside, plus the
// current window's.
func (s Slide) Estimate() float64 {
	return float64(s.Prev)*float64(s.Length-s.Elapsed)/float64(s.Length) + float64(s.Cur)
}

// Fits reports whether a request of cost fits under limit now.
func (s Slide) Fits(cost, limit int64) bool {
	return s.Estimate()+float64(cost) <= float64(limit)
}

// Remaining is what is left under limit now, in whole units.
func (s Slide) Remaining(limit int64) int64 {
	return max(int64(math.Floor(float64(limit)-s.Estimate())), 0)
}

// After returns the window d later, if nothing is counted meanwhile.
func (s Slide) After(d time.Duration) Slide {
	s.Elapsed += d
	switch {
	case s.Elapsed < s.Length:
		return s
	case s.Elapsed < 2*s.Length:
		s.Prev, s.Cur = s.Cur, 0
	default:
		s.Prev, s.Cur = 0, 0
	}
	s.Elapsed %= s.Length
	return s
}

// Until returns how long, if nothing is counted meanwhile, until the
// estimate has fallen to target or below: 0 if it is there now. The
// estimate falls as the previous window's weight does, to the current
// window's count at the end of the current window, and on in the next as
// the current count's weight falls in turn.
func (s Slide) Until(target float64) time.Duration {
	if s.Estimate() <= target {
		return 0
	}
	if target < 0 {
		target = 0
	}
	w, left := float64(s.Length), float64(s.Length-s.Elapsed)
	if float64(s.Cur) <= target {
		// prev × (left - d)/w + cur = target, within this window.
		d := left - (target-float64(s.Cur))*w/float64(s.Prev)
		return CeilDuration(max(d, 0))
	}
	// Next window: cur × (w - e')/w = target at e' = w - target×w/cur.
	return CeilDuration(left + w - target*w/float64(s.Cur))
}

// Start is the start of the sliding window of length that holds now, in
// nanoseconds on a store's clock: windows are aligned on multiples of
// their length, before and after 0 alike. The window that began before
// the clock's first time starts at that time.
func Start(now, length int64) int64 {
	r := now % length
	if r < 0 {
		r += length
	}
	if start := now - r; start <= now {
		return start
	}
	return math.MinInt64
}

// CeilDuration rounds a duration held as a float up to whole nanoseconds.
func CeilDuration(d float64) time.Duration {
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(d))
}

// CeilDiv is d in whole units, rounded up: a client that waits that many
// seconds finds the window over, and Redis, which keeps expiries in
// milliseconds, keeps a window no shorter than asked. Dividing first keeps
// it from overflowing near math.MaxInt64.
func CeilDiv(d, unit time.Duration) int64 {
	n := int64(d / unit)
	if d%unit > 0 {
		n++
	}
	return n
}

// AddClamped is a+b, or the largest time for one past it; b is a
// length, never negative.
func AddClamped(a, b int64) int64 {
	if b > 0 && a+b < a {
		return math.MaxInt64
	}
	return a + b
}

// Limits returns the limits of a request of budget b, the main one first,
// and how many there are. A quota with a Window counts in the windows
// that Kind names for b's Algorithm, and a quota with a Calendar counts
// in its periods. Quotas past the fourth, which a Budget never has, are
// left out.
func Limits(b *store.Budget) (ls [MaxLimits]Limit, n int) {
	ls[0] = Main(b)
	kind := Kind(b.Algorithm)
	n = 1 + min(len(b.Quotas), MaxLimits-1)
	for i := 1; i < n; i++ {
		q := &b.Quotas[i-1]
		ls[i] = Limit{Name: q.Name, Limit: q.Limit, Window: q.Window, Kind: kind, Calendar: q.Calendar}
	}
	return ls, n
}

// Main returns b's main limit.
func Main(b *store.Budget) Limit {
	return Limit{Name: b.Name, Limit: b.Limit, Window: b.Window, Kind: b.Algorithm, Burst: b.Burst}
}

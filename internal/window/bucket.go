package window

import (
	"github.com/gatewaykit/ratelimit/store"
	"math"
	"time"
)

// A token bucket, decided as GCRA (the generic cell rate algorithm): a
// tenant's state is one time, its theoretical arrival time (TAT), when
// its bucket is full again. Each unit of cost moves it Interval later; a
// request fits when, after it, the bucket is full again within Tolerance
// of now (Burst units' time), or within Tolerance and the caller's delay
// for one that may wait for its turn. Times are in microseconds on the
// store's clock (Redis's TIME), as floats: the Redis script does the
// same arithmetic in Lua, whose numbers are floats (take.lua, kinds b
// and B), and a test runs both on the same inputs.
//
// The comparisons allow Eps for rounding: a TAT kept as a float on a
// clock in microseconds since 1970 is exact to a quarter of a
// microsecond, and each write of one whose interval is no whole number
// of microseconds may round it. Eps is a ten-thousandth of an interval
// and a microsecond: far more than a burst's writes round away, and too
// little to let a whole unit more through, whatever the span.

// BucketOf is a bucket's arithmetic: Interval and Tolerance in
// microseconds.
type BucketOf struct {
	Interval  float64 // Window/Limit: the time one unit takes to come back
	Tolerance float64 // Burst × Interval: the time a full bucket takes to fill from empty
	Eps       float64 // what the comparisons allow for rounding
	Burst     int64
}

// Bucket returns l's bucket arithmetic.
func (l *Limit) Bucket() BucketOf { return NewBucket(l.Limit, l.Window, l.Burst) }

// NewBucket is the arithmetic of a bucket of limit per width, burst at
// most.
func NewBucket(limit int64, width time.Duration, burst int64) BucketOf {
	iv := float64(width) / (1e3 * float64(limit)) // one division: a request makes this
	return BucketOf{Interval: iv, Tolerance: float64(burst) * iv, Eps: BucketEps(iv), Burst: burst}
}

// BucketEps is the Eps of a bucket whose interval is iv µs.
func BucketEps(iv float64) float64 { return iv*1e-4 + 1 }

// Most is how far behind now, in µs, a bucket may be after a cost that
// fits, when the caller may wait delay µs: the script's comparison, as
// Take's.
func (b BucketOf) Most(delay float64) float64 { return b.Tolerance + delay + b.Eps }

// Take decides a cost for a bucket that is full again after left
// microseconds (0 or less: full now), when the caller may wait delay
// microseconds for its turn: it returns how long after now the bucket is
// full again after the decision, and whether the cost fits. A cost that
// does not fit changes nothing.
func (b BucketOf) Take(left float64, cost int64, delay float64) (float64, bool) {
	left = max(left, 0)
	after := left + float64(cost)*b.Interval
	if after <= b.Most(delay) {
		return after, true
	}
	return left, false
}

// Give gives back cost (a negative cost charges it) in a bucket that is
// full again after left microseconds, and returns how long after now it
// is full again: a give-back never moves that before now, a charge may
// move it past Tolerance, which the next requests then wait out.
func (b BucketOf) Give(left float64, cost int64) float64 {
	return max(max(left, 0)-float64(cost)*b.Interval, 0)
}

// Used is how many units of the bucket are spent while it is full again
// after left microseconds: rounded up, so that Burst − Used is the whole
// units it holds now.
func (b BucketOf) Used(left float64) int64 {
	if left <= b.Eps {
		return 0
	}
	return int64(math.Ceil((left - b.Eps) / b.Interval))
}

// State is the State of a bucket that is full again after left
// microseconds, which a cost did or did not fit in: Left that time, in
// whole nanoseconds rounded up, Length the Tolerance, N the units spent.
func (b BucketOf) State(left float64, fits bool) store.Count {
	left = max(left, 0)
	return store.Count{N: b.Used(left), Fits: fits, Left: CeilDuration(left * 1e3), Length: CeilDuration(b.Tolerance * 1e3)}
}

// Wait is how long a caller whose cost fitted, leaving the bucket as st
// says, waits for its turn: 0 for one that fitted without waiting.
func (b BucketOf) Wait(st *store.Count) time.Duration {
	return max(st.Left-st.Length, 0)
}

// bucketFigures is Figures for a bucket: the whole units it holds now,
// the time until it is full, and for a refused cost the time until it
// fits (0 for a cost above the burst, which never fits).
func (l *Limit) bucketFigures(st *store.Count, cost int64) Figures {
	b := l.Bucket()
	f := Figures{Remaining: max(b.Burst-st.N, 0), Reset: st.Left}
	if !st.Fits && cost <= b.Burst {
		// Fits once left + cost × Interval ≤ Tolerance (+ Eps, which
		// Retry does not count on).
		f.Retry = max(st.Left+CeilDuration(float64(cost)*b.Interval*1e3)-st.Length, 0)
	}
	return f
}

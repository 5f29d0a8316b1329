// Package store is the contract between a rate limiter and the store
// that keeps its counts. A Store decides Requests against a Budget and
// reports Counts. It says what it decides in Features. The package
// storetest checks a Store against this contract.
//
// The package imports nothing but the standard library. The limiter in
// the root package and every store, the built-in ones and a store of
// your own, import it, so that each of these types is written once.
package store

import (
	"math"
	"strconv"
	"time"
)

// Algorithm is how a limit counts a tenant's requests in time.
type Algorithm uint8

const (
	// FixedWindow counts in windows that start at a tenant's first
	// request.
	FixedWindow Algorithm = iota
	// SlidingWindow counts in windows aligned on the store's clock, and
	// weighs the previous window's count by the share of it still inside
	// the last window.
	SlidingWindow
	// InFlight counts the requests of a tenant that run at once, each
	// for at most a lease.
	InFlight
	// TokenBucket is a token bucket, decided as GCRA on the store's
	// clock.
	TokenBucket
)

// String returns "fixed window", "sliding window", "in flight" or "token
// bucket".
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed window"
	case SlidingWindow:
		return "sliding window"
	case InFlight:
		return "in flight"
	case TokenBucket:
		return "token bucket"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Calendar is a period of the UTC calendar that a quota counts in. The
// zero value is no period: the limit counts in a window.
type Calendar uint8

const (
	// Day is the UTC day. It starts at 00:00 UTC.
	Day Calendar = iota + 1
	// Month is the calendar month, of 28 to 31 days. It starts at 00:00
	// UTC on its first day.
	Month
	// Week is the ISO week, of 7 days. It starts at 00:00 UTC on Monday.
	Week
	// Year is the calendar year, of 365 or 366 days. It starts at 00:00
	// UTC on 1 January.
	Year
)

// Period returns the period of c that holds now: when it starts and when
// it ends, in UTC. A period holds its start and not its end.
func (c Calendar) Period(now time.Time) (start, end time.Time) {
	y, m, d := now.UTC().Date()
	switch c {
	case Day:
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	case Week:
		// Days since Monday: time.Weekday counts from Sunday.
		back := (int(now.UTC().Weekday()) + 6) % 7
		start = time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 7)
	case Year:
		start = time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(1, 0, 0)
	}
	start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// Marks name the windows a request was counted in, one for each limit,
// the main limit's first, then each quota's: the Mark of each Count that
// Take answered. Give gives back in those windows only. The mark NoWindow
// names no window: that limit is left alone.
type Marks [5]int64

// NoWindow is a mark that names no window. Giving back or charging with
// it leaves the limit alone, a bucket's too.
const NoWindow = math.MinInt64

// A Count is what a store holds of one limit after it decides a request.
//
// For a TokenBucket, N is the units spent (the burst less the whole units
// the bucket holds), Left the time until the bucket is full again, Length
// the time it takes to fill from empty (burst × window / limit), and Mark
// is 0. Left past Length is a reserved turn's wait or a settled debt.
type Count struct {
	// N is the count after the decision: with the cost when it was
	// counted, without it when not. For InFlight, it is the slots held.
	N int64

	// Fits reports whether the request's cost fit in this limit.
	Fits bool

	// Left is how long the window or calendar period has to run. For a
	// fixed window in which nothing counts yet, it is the length of the
	// window a request would start.
	Left time.Duration

	// Length is the window's length as the store counts it, or the
	// calendar period's.
	Length time.Duration

	// Prev is a sliding window's previous window's count.
	Prev int64

	// Mark names the window the request was counted in, so that a give
	// back finds it again. It is any number by which the store knows the
	// window.
	Mark int64
}

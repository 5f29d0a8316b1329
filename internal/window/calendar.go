package window

import "time"

// Calendar is a period of the UTC calendar: the numbers of
// ratelimit.Calendar.
type Calendar uint8

const (
	NoCalendar Calendar = iota
	Day                 // the UTC day, from 00:00 UTC
	Month               // the calendar month, of 28 to 31 days, from 00:00 UTC on its first
	Week                // the ISO week, from 00:00 UTC on Monday to the next Monday
	Year                // the calendar year, of 365 or 366 days, from 00:00 UTC on 1 January
)

// Period returns the period of c that holds now: when it starts and when
// it ends, in UTC. The Redis script does the same arithmetic in Lua.
func Period(c Calendar, now time.Time) (start, end time.Time) {
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

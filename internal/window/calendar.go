package window

import "time"

// Calendar is a period of the UTC calendar: the numbers of
// ratelimit.Calendar.
type Calendar uint8

const (
	NoCalendar Calendar = iota
	Day                 // the UTC day, from 00:00 UTC
	Month               // the calendar month, of 28 to 31 days, from 00:00 UTC on its first
)

// Period returns the period of c that holds now: when it starts and when
// it ends, in UTC. The Redis script does the same arithmetic in Lua.
func Period(c Calendar, now time.Time) (start, end time.Time) {
	y, m, d := now.UTC().Date()
	if c == Day {
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
	start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

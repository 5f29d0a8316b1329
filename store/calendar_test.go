package store

import (
	"testing"
	"time"
)

// The length of every month, in leap years and in years that are not:
// 1900 and 2100 are divisible by 4 but not by 400, 2000 by 400. The
// lengths are written out rather than computed, so that the test does not
// share a mistake with the code.
func TestPeriodMonthLengths(t *testing.T) {
	common := [12]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	leap := [12]int{31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for _, tt := range []struct {
		year int
		days [12]int
	}{
		{2024, leap},
		{2000, leap},
		{2023, common},
		{1900, common},
		{2100, common},
	} {
		for i, days := range tt.days {
			m := time.Month(i + 1)
			first := time.Date(tt.year, m, 1, 0, 0, 0, 0, time.UTC)
			next := first.Add(time.Duration(days) * 24 * time.Hour)
			// The first instant, the middle and the last nanosecond.
			for _, now := range []time.Time{first, first.Add(time.Duration(days) * 12 * time.Hour), next.Add(-1)} {
				start, end := Month.Period(now)
				if !start.Equal(first) || !end.Equal(next) {
					t.Errorf("Month.Period(%v) = [%v, %v); want [%v, %v), %d days",
						now, start, end, first, next, days)
				}
			}
		}
	}
}

// Periods of a day, a week, a month and a year at their edges, and for times given in
// other locations: the period is always UTC's.
func TestPeriod(t *testing.T) {
	utc := func(y int, m time.Month, d, h, min, s, ns int) time.Time {
		return time.Date(y, m, d, h, min, s, ns, time.UTC)
	}
	east := time.FixedZone("UTC+10", 10*60*60)
	west := time.FixedZone("UTC-5", -5*60*60)
	for _, tt := range []struct {
		name       string
		c          Calendar
		now        time.Time
		start, end time.Time
	}{
		{"a day, at midnight", Day, utc(2024, 2, 29, 0, 0, 0, 0), utc(2024, 2, 29, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0)},
		{"a day, at noon", Day, utc(2024, 2, 29, 12, 0, 0, 0), utc(2024, 2, 29, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0)},
		{"a day, its last nanosecond", Day, utc(2024, 2, 29, 23, 59, 59, 999999999), utc(2024, 2, 29, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0)},
		{"a day, the next midnight", Day, utc(2024, 3, 1, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0), utc(2024, 3, 2, 0, 0, 0, 0)},
		{"a day, the last of the year", Day, utc(2023, 12, 31, 23, 59, 59, 999999999), utc(2023, 12, 31, 0, 0, 0, 0), utc(2024, 1, 1, 0, 0, 0, 0)},
		{"a day, 1970's first", Day, utc(1970, 1, 1, 0, 0, 0, 0), utc(1970, 1, 1, 0, 0, 0, 0), utc(1970, 1, 2, 0, 0, 0, 0)},
		{"a day, before 1970", Day, utc(1969, 12, 31, 23, 0, 0, 0), utc(1969, 12, 31, 0, 0, 0, 0), utc(1970, 1, 1, 0, 0, 0, 0)},
		{"a month, at midnight on its first", Month, utc(2024, 3, 1, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0), utc(2024, 4, 1, 0, 0, 0, 0)},
		{"a month, its last nanosecond", Month, utc(2024, 3, 31, 23, 59, 59, 999999999), utc(2024, 3, 1, 0, 0, 0, 0), utc(2024, 4, 1, 0, 0, 0, 0)},
		{"a month, the year's last", Month, utc(2023, 12, 31, 23, 59, 59, 999999999), utc(2023, 12, 1, 0, 0, 0, 0), utc(2024, 1, 1, 0, 0, 0, 0)},
		{"a month, before 1970", Month, utc(1969, 12, 15, 0, 0, 0, 0), utc(1969, 12, 1, 0, 0, 0, 0), utc(1970, 1, 1, 0, 0, 0, 0)},
		// 05:00 on 1 March east of UTC is 19:00 on 29 February in UTC.
		{"a day, east of UTC", Day, time.Date(2024, 3, 1, 5, 0, 0, 0, east), utc(2024, 2, 29, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0)},
		{"a month, east of UTC", Month, time.Date(2024, 3, 1, 5, 0, 0, 0, east), utc(2024, 2, 1, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0)},
		// 22:00 on 31 January west of UTC is 03:00 on 1 February in UTC.
		{"a day, west of UTC", Day, time.Date(2024, 1, 31, 22, 0, 0, 0, west), utc(2024, 2, 1, 0, 0, 0, 0), utc(2024, 2, 2, 0, 0, 0, 0)},
		{"a month, west of UTC", Month, time.Date(2024, 1, 31, 22, 0, 0, 0, west), utc(2024, 2, 1, 0, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0, 0)},
		// Midnight in the location is not the period's edge.
		{"a day, midnight east of UTC", Day, time.Date(2024, 7, 1, 0, 0, 0, 0, east), utc(2024, 6, 30, 0, 0, 0, 0), utc(2024, 7, 1, 0, 0, 0, 0)},
		{"a month, midnight east of UTC", Month, time.Date(2024, 7, 1, 0, 0, 0, 0, east), utc(2024, 6, 1, 0, 0, 0, 0), utc(2024, 7, 1, 0, 0, 0, 0)},
		// A week runs from 00:00 UTC on Monday to the next Monday, across the
		// turn of a month and of a year (1 January 2024 was a Monday, 1
		// January 1970 a Thursday); a year is of 365 or 366 days.
		{"a week, at its first instant", Week, utc(2024, 1, 1, 0, 0, 0, 0), utc(2024, 1, 1, 0, 0, 0, 0), utc(2024, 1, 8, 0, 0, 0, 0)},
		{"a week, its Sunday's last nanosecond", Week, utc(2024, 1, 7, 23, 59, 59, 999999999), utc(2024, 1, 1, 0, 0, 0, 0), utc(2024, 1, 8, 0, 0, 0, 0)},
		{"a week, the next Monday", Week, utc(2024, 1, 8, 0, 0, 0, 0), utc(2024, 1, 8, 0, 0, 0, 0), utc(2024, 1, 15, 0, 0, 0, 0)},
		{"a week across the turn of the year", Week, utc(2025, 1, 1, 12, 0, 0, 0), utc(2024, 12, 30, 0, 0, 0, 0), utc(2025, 1, 6, 0, 0, 0, 0)},
		{"a week across February's end", Week, utc(2024, 2, 29, 0, 0, 0, 0), utc(2024, 2, 26, 0, 0, 0, 0), utc(2024, 3, 4, 0, 0, 0, 0)},
		{"a week, 1970's first day", Week, utc(1970, 1, 1, 0, 0, 0, 0), utc(1969, 12, 29, 0, 0, 0, 0), utc(1970, 1, 5, 0, 0, 0, 0)},
		// 05:00 on Monday east of UTC is 19:00 on Sunday in UTC.
		{"a week, east of UTC", Week, time.Date(2024, 1, 8, 5, 0, 0, 0, east), utc(2024, 1, 1, 0, 0, 0, 0), utc(2024, 1, 8, 0, 0, 0, 0)},
		{"a year, at its first instant", Year, utc(2024, 1, 1, 0, 0, 0, 0), utc(2024, 1, 1, 0, 0, 0, 0), utc(2025, 1, 1, 0, 0, 0, 0)},
		{"a year, its last nanosecond", Year, utc(2023, 12, 31, 23, 59, 59, 999999999), utc(2023, 1, 1, 0, 0, 0, 0), utc(2024, 1, 1, 0, 0, 0, 0)},
		{"a year, in February", Year, utc(2100, 2, 28, 12, 0, 0, 0), utc(2100, 1, 1, 0, 0, 0, 0), utc(2101, 1, 1, 0, 0, 0, 0)},
		{"a year, before 1970", Year, utc(1969, 7, 1, 0, 0, 0, 0), utc(1969, 1, 1, 0, 0, 0, 0), utc(1970, 1, 1, 0, 0, 0, 0)},
		{"a year, east of UTC", Year, time.Date(2024, 1, 1, 5, 0, 0, 0, east), utc(2023, 1, 1, 0, 0, 0, 0), utc(2024, 1, 1, 0, 0, 0, 0)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start, end := tt.c.Period(tt.now)
			if !start.Equal(tt.start) || !end.Equal(tt.end) {
				t.Errorf("%d.Period(%v) = [%v, %v), want [%v, %v)", tt.c, tt.now, start, end, tt.start, tt.end)
			}
			if start.Location() != time.UTC || end.Location() != time.UTC {
				t.Errorf("%d.Period(%v) is in %v and %v, want UTC", tt.c, tt.now, start.Location(), end.Location())
			}
			if tt.now.Before(start) || !tt.now.Before(end) {
				t.Errorf("%d.Period(%v) = [%v, %v) does not hold the time", tt.c, tt.now, start, end)
			}
		})
	}
	// The lengths of years: 2000 and 2024 leap, 1900, 2023 and 2100 not.
	for y, days := range map[int]int{2000: 366, 2024: 366, 1900: 365, 2023: 365, 2100: 365} {
		start, end := Year.Period(time.Date(y, 6, 1, 0, 0, 0, 0, time.UTC))
		if got := end.Sub(start); got != time.Duration(days)*24*time.Hour {
			t.Errorf("the year %d lasts %v, want %d days", y, got, days)
		}
	}

}

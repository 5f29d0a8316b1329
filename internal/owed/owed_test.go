package owed

import (
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
)

// windows owes in limit j alone, marked mark, of length, until end.
func windows(j int, mark int64, length, end time.Duration) *Windows {
	w := &Windows{End: end}
	for i := range w.Marks {
		w.Marks[i] = window.NoWindow
	}
	w.Marks[j], w.Lens[j] = mark, length
	return w
}

// take takes every debt out of t at now, by key.
func take(t *Table[string, int], now time.Duration) map[string]Item[string, int] {
	items := map[string]Item[string, int]{}
	for i := range t.Shards() {
		for _, it := range t.Take(i, now) {
			items[it.Key] = it
		}
	}
	return items
}

// Units owed in one window add up; a limit's window that changes starts
// its debt again (the old window has ended); Next charges the largest
// amount first, in the limits that owe it; Settle takes a give-back off.
func TestDebts(t *testing.T) {
	tb := New[string, int](10, nil)
	key := []byte("rl:acme")
	tb.Add(key, "req", 1, 2, windows(0, 1000, time.Minute, time.Minute), 0)
	tb.Add(key, "req", 1, 2, windows(1, 5000, time.Hour, time.Hour), 0)
	tb.Add(key, "req", 1, 3, windows(1, 5000+int64(time.Second), time.Hour, time.Hour), 0)       // the same hour, marked a little off
	tb.Add(key, "req", 1, 1, windows(0, 1000+int64(time.Minute), time.Minute, 2*time.Minute), 0) // the next minute
	tb.Settle(key, 1, 0)
	it, ok := take(tb, 0)["rl:acme"]
	if !ok {
		t.Fatal("no debt taken")
	}
	if it.Units[0] != 0 || it.Units[1] != 4 || it.End != time.Hour {
		t.Fatalf("owed %v until %v; want 0 in the minute (1 in the next, less the 1 given back), 4 in the hour, until 1h", it.Units, it.End)
	}
	u, marks := it.Next()
	if u != 4 || marks[1] != 5000+int64(time.Second) || marks[0] != window.NoWindow {
		t.Errorf("next charge %d at %v; want 4 in the hour alone", u, marks)
	}
	it.Paid(u)
	if u, _ := it.Next(); u != 0 {
		t.Errorf("after paying: %d owed; want none", u)
	}
}

// A debt under other limits replaces the one before; a debt put back
// keeps its units beside what was added meanwhile; Due answers once
// while a sweep runs, and not before the time Swept set.
func TestPutBackAndSweeps(t *testing.T) {
	var held int64
	tb := New[string, int](10, func(n int64, _ uint64) { held += n })
	key := []byte("rl:acme")
	tb.Add(key, "old plan", 1, 5, windows(0, 1000, time.Minute, time.Minute), 0)
	tb.Add(key, "new plan", 2, 2, windows(0, 1000, time.Minute, time.Minute), 0)
	if !tb.Owing() || !tb.Due(0) || tb.Due(0) {
		t.Fatal("Due: want true once while something is owed, then false while the sweep runs")
	}
	it := take(tb, 0)["rl:acme"]
	if it.Req != "new plan" || it.Units[0] != 2 || held != 0 {
		t.Fatalf("taken %q owing %v, %d held; want the new plan's 2, none held", it.Req, it.Units, held)
	}
	tb.Add(key, "new plan", 2, 1, windows(0, 1000, time.Minute, time.Minute), time.Second)
	tb.PutBack(&it, time.Second)
	tb.Swept(10 * time.Second)
	if tb.Due(5 * time.Second) {
		t.Error("Due before the time Swept set")
	}
	if !tb.Due(10 * time.Second) {
		t.Error("not Due at the time Swept set")
	}
	if got := take(tb, time.Second)["rl:acme"]; got.Units[0] != 3 {
		t.Errorf("after the put-back: %v owed; want 3", got.Units)
	}
	tb.Add(key, "new plan", 2, 1, windows(0, 1000, time.Minute, time.Minute), 0)
	tb.Forget(key)
	if tb.Owing() {
		t.Error("owing after Forget")
	}
}

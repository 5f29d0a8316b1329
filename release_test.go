package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Release gives back what a Decision took, in the windows it was counted
// in. These tests run on a MemoryCounter (on a fake clock) and on real
// Redis (a single node, a cluster and a ring), in both algorithms, with
// and without quotas.

var releaseCases = []struct {
	name   string
	quotas []Quota
}{
	{"alone", nil},
	{"with quotas", []Quota{{Name: "day", Limit: 100, Calendar: CalendarDay}, {Name: "hour", Limit: 50, Window: time.Hour}}},
}

// A request given back leaves its budget as if it had never come, in
// every limit; a decision that took nothing gives nothing back.
func TestReleaseGivesBack(t *testing.T) {
	for _, c := range releaseCases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Limit: 3, Window: time.Minute, Quotas: c.quotas}
			eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
				ctx := context.Background()
				var ds []Decision
				for range 3 {
					ds = append(ds, takeExpect(t, lim, tenant, true, ""))
				}
				refused := takeExpect(t, lim, tenant, false, "default")
				if err := lim.Release(ctx, refused); err != nil {
					t.Fatalf("Release of a refusal: %v, want nil", err)
				}
				if got := used(t, lim, tenant)[0]; got != 3 {
					t.Fatalf("used %d after giving back a refusal, want 3: it took nothing", got)
				}
				for i, d := range ds[:2] {
					if err := lim.Release(ctx, d); err != nil {
						t.Fatalf("Release %d: %v", i, err)
					}
				}
				want := []int{1}
				if c.quotas != nil {
					want = []int{1, 1, 1}
				}
				expectUsed(t, lim, tenant, want...)
				// The over-limit cache forgot the refusal: two fit again.
				takeExpect(t, lim, tenant, true, "")
				takeExpect(t, lim, tenant, true, "")
				takeExpect(t, lim, tenant, false, "default")

				d := lim.TakeN(ctx, tenant+"-costly", 3)
				if !d.Allowed {
					t.Fatalf("cost 3: %+v", d)
				}
				if err := lim.Release(ctx, d); err != nil {
					t.Fatalf("Release of cost 3: %v", err)
				}
				if got := used(t, lim, tenant+"-costly")[0]; got != 0 {
					t.Fatalf("used %d after giving back a cost of 3, want 0", got)
				}
			})
		})
	}
}

// A window that has ended is left alone: giving back a request of the
// window before does not take from the one running.
func TestReleaseLeavesAnEndedWindowAlone(t *testing.T) {
	const window = 400 * time.Millisecond
	for _, c := range releaseCases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Limit: 5, Window: window, Quotas: c.quotas}
			eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
				old := takeExpect(t, lim, tenant, true, "")
				// Past the window, and for a sliding one past the next too,
				// so that the old count weighs nothing; the next requests
				// in one window.
				startOfWindow(t, lim, advance, window, 2)
				takeExpect(t, lim, tenant, true, "")
				takeExpect(t, lim, tenant, true, "")
				if err := lim.Release(context.Background(), old); err != nil {
					t.Fatalf("Release: %v", err)
				}
				got := used(t, lim, tenant)
				if got[0] != 2 {
					t.Fatalf("used %v after giving back a request of an ended window, want 2 in the main limit", got)
				}
				if c.quotas != nil && (got[1] != 2 || got[2] != 2) {
					// The day and the hour run on: they take it back.
					t.Fatalf("used %v, want the day and the hour to give back the old request: 2 each", got)
				}
			})
		})
	}
}

// On Redis a window is recognised by where it should be now, told from the
// mark that the replica set when the take's answer came (see
// redisstore.Store.Give): a slow answer makes the mark late by as much.
// Within half a window of late, a Release after the window rolled over,
// less than a window later, still leaves the new window alone, alone and
// with quotas; the quotas, still running, give the request back. A
// quarter of a window late stands in for the slow answer: a whole
// window's tolerance would take it for the new window.
//
// The real answers add to that quarter: the old take's and the Release's
// own trip to the server. The test measures both; a run in which they
// came so late that even half a window's tolerance could not tell the
// windows apart says nothing, and is made again on a tenant of its own.
func TestReleaseWithALateMarkLeavesTheNewWindowAlone(t *testing.T) {
	const window, late = 500 * time.Millisecond, 500 * time.Millisecond / 4
	for _, c := range releaseCases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Limit: 5, Window: window, Quotas: c.quotas}
			eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
				if lim.info.Local {
					t.Skip("a MemoryCounter names its windows exactly: no mark is late")
				}
				for try := 1; !releaseWithALateMark(t, lim, fmt.Sprint(tenant, "-", try), window, late); try++ {
					if try == 3 {
						t.Fatal("in 3 runs the answers came too late to tell the windows apart: the machine is too slow for this test")
					}
				}
			})
		})
	}
}

// releaseWithALateMark is one run of the test above, on tenant. It
// reports false, having checked nothing of the new window, when the
// answers came too late for the run to tell.
func releaseWithALateMark(t *testing.T, lim *Limiter, tenant string, window, late time.Duration) bool {
	ctx := context.Background()
	used(t, lim, tenant) // the clients connected
	// The old request early in a window of the server's clock (the
	// machine's), so that it is that sliding window's and its fixed
	// window ends early in the next, and answered at once, so that
	// its mark is late by no more than this test makes it. A take
	// that was not tries again in the next window.
	var old Decision
	var sent, back time.Time
	for try := 0; ; try++ {
		start := time.Now().Truncate(window).Add(window)
		time.Sleep(time.Until(start.Add(20 * time.Millisecond)))
		sent = time.Now()
		old = takeExpect(t, lim, tenant, true, "")
		if back = time.Now(); back.Sub(sent) < window/10 && back.Sub(start) < window/4 {
			break
		}
		if err := lim.Release(ctx, old); err != nil || try == 2 {
			t.Fatalf("the take took %v and came back %v into its window (%v): the machine is too slow for this test",
				back.Sub(sent), back.Sub(start), err)
		}
	}
	// Its window has rolled over: a fixed one ended, a sliding one
	// is the one before. The new window's first requests come.
	time.Sleep(time.Until(back.Add(window + 30*time.Millisecond)))
	newSent := time.Now()
	takeExpect(t, lim, tenant, true, "")
	takeExpect(t, lim, tenant, true, "")
	before := used(t, lim, tenant)
	for j := range old.marks {
		old.marks[j] += int64(late)
	}
	releaseSent := time.Now()
	if err := lim.Release(ctx, old); err != nil {
		t.Fatalf("Release: %v", err)
	}
	releaseTrip := time.Since(releaseSent)
	after := used(t, lim, tenant)
	for j := 1; j < len(after); j++ {
		if after[j] != before[j]-1 {
			t.Fatalf("used %v before the Release, %v after; want each quota, still running, to give it back", before, after)
		}
	}
	// How far, at least, the new window is from where the late mark
	// says the old one should be (see redisstore.Store.Give): a fixed
	// window's time left differs by the time from the old take's
	// answer to the new window's first request, a sliding window's
	// time run by a window less the old answer's trip; both less the
	// lateness added and the Release's trip. The script takes the
	// window for the old one within half a window.
	apart := newSent.Sub(back)
	if lim.opts.Algorithm == SlidingWindow {
		apart = window - back.Sub(sent)
	}
	apart -= late + releaseTrip + time.Millisecond // the script's whole milliseconds
	if apart <= window/2 {
		t.Logf("the Release took %v and the old take %v: the new window was %v from the late mark, within the half window (%v) a correct store may take for it; trying again",
			releaseTrip, back.Sub(sent), apart, window/2)
		return false
	}
	if after[0] != before[0] {
		t.Fatalf("used %v before the Release of the old window's request, %v after: the new window gave it back", before, after)
	}
	return true
}

// Each limit of a tenant with quotas tells its own window from the others':
// a Release after the main window has ended but not the quota's gives
// back in the quota alone, and after the quota's has ended but not the
// main one's, in the main one alone. The quota is the tighter limit, so
// that it, not the main one, names the decision.
func TestReleaseTellsEachLimitsWindowApart(t *testing.T) {
	const short = 400 * time.Millisecond
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"the main window ended", Options{Limit: 10, Window: short, Quotas: []Quota{{Name: "long", Limit: 5, Window: time.Hour}}}},
		{"the quota's window ended", Options{Limit: 10, Window: time.Hour, Quotas: []Quota{{Name: "short", Limit: 5, Window: short}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachTakeSubject(t, c.opts, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
				old := takeExpect(t, lim, tenant, true, "")
				if old.Policy != c.opts.Quotas[0].Name {
					t.Fatalf("the decision is named by %q, want the quota", old.Policy)
				}
				// Past the short window, and for a sliding one past the next
				// too, so that the old count weighs nothing; the next
				// requests in one window.
				startOfWindow(t, lim, advance, short, 2)
				takeExpect(t, lim, tenant, true, "")
				takeExpect(t, lim, tenant, true, "")
				if err := lim.Release(context.Background(), old); err != nil {
					t.Fatalf("Release: %v", err)
				}
				// The ended window keeps the two of its own; the running one
				// gives the old request back, 3 less 1.
				expectUsed(t, lim, tenant, 2, 2)
			})
		})
	}
}

// A decision decided by the fallback is given back in the fallback.
func TestReleaseInTheFallback(t *testing.T) {
	fb := NewMemoryCounter()
	lim := NewLimiter(Options{Limit: 2, Window: time.Minute, Counter: CounterStore(&scripted{err: errors.New("store down")}),
		Fallback: fb, Logger: newLogRecorder().logger()})
	ctx := context.Background()
	d1 := lim.Take(ctx, "acme")
	d2 := lim.Take(ctx, "acme")
	if d1.By != ByFallback || !d2.Allowed || lim.Take(ctx, "acme").Allowed {
		t.Fatalf("%+v %+v; want two allowed by the fallback, then a refusal", d1, d2)
	}
	if err := lim.Release(ctx, d1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if d := lim.Take(ctx, "acme"); !d.Allowed || d.By != ByFallback {
		t.Fatalf("after Release: %+v, want allowed by the fallback", d)
	}
}

// A Decision of another limiter is not this one's to give back.
func TestReleaseOfAnotherLimiter(t *testing.T) {
	a := NewLimiter(Options{Limit: 2, Window: time.Minute})
	b := NewLimiter(Options{Limit: 2, Window: time.Minute})
	err := b.Release(context.Background(), a.Take(context.Background(), "acme"))
	if err == nil || !strings.Contains(err.Error(), "another limiter") {
		t.Fatalf("Release of another limiter's decision: %v", err)
	}
	c := NewLimiter(Options{Limit: 2, Window: time.Minute, Counter: CounterStore(&scripted{err: errors.New("store down")}), Logger: newLogRecorder().logger()})
	if err := c.wiring.GiveErr; err == nil || !strings.Contains(err.Error(), "scripted") {
		t.Fatalf("giving back with a Counter of one's own: %v, want an error naming it", err)
	}
}

// Giving back on a MemoryCounter allocates nothing, with quotas too.
func TestReleaseAllocatesNothing(t *testing.T) {
	for _, c := range releaseCases {
		for _, algo := range []Algorithm{FixedWindow, SlidingWindow, InFlight} {
			if algo == InFlight && c.quotas != nil {
				continue
			}
			lim := NewLimiter(Options{Limit: 3, Window: time.Minute, Algorithm: algo, Quotas: c.quotas})
			ctx := context.Background()
			lim.Release(ctx, lim.Take(ctx, "acme")) // the tenant's entry
			allocs := testing.AllocsPerRun(100, func() {
				var d Decision
				lim.take(ctx, &d, "acme", 1)
				if !d.Allowed {
					t.Fatal("refused")
				}
				if err := lim.Release(ctx, d); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s %v: %v allocations a take and release, want 0", c.name, algo, allocs)
			}
		}
	}
}

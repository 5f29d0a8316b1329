package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Settle sets what a Decision took to the cost its response showed,
// charging or giving back the difference in the windows it was counted
// in. These tests run on a MemoryCounter (on a fake clock) and on real
// Redis (a single node, a cluster and a ring), in both algorithms, with
// and without quotas.

// The measured case: a request decided at cost 1 and settled at
// 50, against a Limit of 10, leaves a debt. The tenant's next requests
// are refused until its budget covers the debt: in a fixed window until
// the next window, in a sliding one until the weighted count has fallen
// enough; then they are allowed.
//
// On Redis the store's clock is real: the request comes just after a
// window's start (startOfWindow), so that it is settled in the window it
// was counted in. A machine that stalls for most of a window between the
// two has the settlement find that window ended, which by design charges
// nothing (TestSettleLeavesTheWindowBeforeAlone); such an attempt, seen
// on the store's clock, is tried again with a tenant of its own.
func TestSettleChargesPastTheLimit(t *testing.T) {
	const window = 400 * time.Millisecond
	eachTakeSubject(t, Options{Limit: 10, Window: window}, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		clock := storeClock(t, lim)
		for try := 1; ; try++ {
			startOfWindow(t, lim, advance, window, 1)
			from := clock()
			d := lim.TakeN(ctx, tenant, 1)
			if !d.Allowed {
				t.Fatalf("TakeN(1): %+v", d)
			}
			if err := lim.Settle(ctx, d, 50); err != nil {
				t.Fatalf("Settle to 50: %v", err)
			}
			got := used(t, lim, tenant)[0]
			if got == 50 {
				break
			}
			if took := clock().Sub(from); took < window-10*time.Millisecond || try == 3 {
				t.Fatalf("used %d after settling at 50, want 50: the limit does not cap a charge (the store's clock ran %v meanwhile)", got, took)
			}
			t.Logf("attempt %d: the store's clock passed the window's end between the request and its settlement; trying again", try)
			tenant = fmt.Sprintf("%s-%d", tenant, try)
		}
		refused := takeExpect(t, lim, tenant, false, "default")
		wait := refused.RetryAfter
		bound := window // a fixed window: the rest of it
		if lim.opts.Algorithm == SlidingWindow {
			// 50 weighs 9 or less once 82% of the next window has run.
			bound = 2 * window
		}
		if wait <= 0 || wait > bound {
			t.Fatalf("refused with RetryAfter %v, want within %v", wait, bound)
		}
		advance(wait / 2)
		takeExpect(t, lim, tenant, false, "default")
		advance(wait/2 + 50*time.Millisecond)
		d := takeExpect(t, lim, tenant, true, "")
		if lim.opts.Algorithm == FixedWindow && d.Remaining != 9 {
			t.Fatalf("the next fixed window's first request: remaining %d, want 9: the debt stays in its window", d.Remaining)
		}
	})
}

// Settling at a lower cost gives back the difference; at the same cost it
// changes nothing.
func TestSettleGivesBackTheDifference(t *testing.T) {
	for _, c := range releaseCases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Limit: 10, Window: time.Minute, Quotas: c.quotas}
			eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
				ctx := context.Background()
				d := lim.TakeN(ctx, tenant, 5)
				if !d.Allowed {
					t.Fatalf("TakeN(5): %+v", d)
				}
				if err := lim.Settle(ctx, d, 5); err != nil {
					t.Fatalf("Settle to the same cost: %v", err)
				}
				want := []int{5}
				if c.quotas != nil {
					want = []int{5, 5, 5}
				}
				expectUsed(t, lim, tenant, want...)
				if err := lim.Settle(ctx, d, 2); err != nil {
					t.Fatalf("Settle to 2: %v", err)
				}
				for i := range want {
					want[i] = 2
				}
				expectUsed(t, lim, tenant, want...)
				if d := lim.TakeN(ctx, tenant, 8); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("TakeN(8) after settling 5 at 2: %+v, want allowed with nothing left", d)
				}
				takeExpect(t, lim, tenant, false, "default")
			})
		})
	}
}

// A charge counts in every limit the request was counted in, the main one
// and each quota; so does a give-back.
func TestSettleInEveryLimit(t *testing.T) {
	quotas := []Quota{{Name: "day", Limit: 100, Calendar: CalendarDay}, {Name: "hour", Limit: 50, Window: time.Hour}}
	eachTakeSubject(t, Options{Limit: 10, Window: time.Minute, Quotas: quotas}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		ctx := context.Background()
		d := lim.TakeN(ctx, tenant, 4)
		if !d.Allowed {
			t.Fatalf("TakeN(4): %+v", d)
		}
		if err := lim.Settle(ctx, d, 1); err != nil {
			t.Fatalf("Settle to 1: %v", err)
		}
		expectUsed(t, lim, tenant, 1, 1, 1)
		d = takeExpect(t, lim, tenant, true, "")
		if err := lim.Settle(ctx, d, 30); err != nil {
			t.Fatalf("Settle to 30: %v", err)
		}
		expectUsed(t, lim, tenant, 31, 31, 31)
		takeExpect(t, lim, tenant, false, "default")
	})
}

// A window that has ended is left alone: settling a request of the window
// before neither charges nor gives back in the one running, while the
// quotas, still running, are charged. With no request since, the next one
// finds a fresh window: a charge makes no window again (on Redis, no key
// without an expiry).
func TestSettleLeavesAnEndedWindowAlone(t *testing.T) {
	const window = 400 * time.Millisecond
	for _, c := range releaseCases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Limit: 5, Window: window, Quotas: c.quotas}
			eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
				ctx := context.Background()
				charged := takeExpect(t, lim, tenant, true, "")
				given := lim.TakeN(ctx, tenant, 3)
				if !given.Allowed {
					t.Fatalf("TakeN(3): %+v", given)
				}
				// Past the window, and for a sliding one past the next too,
				// so that the old count weighs nothing; the next requests
				// in one window.
				startOfWindow(t, lim, advance, window, 2)
				for _, s := range []struct {
					d    Decision
					cost int
				}{{charged, 20}, {given, 0}} {
					if err := lim.Settle(ctx, s.d, s.cost); err != nil {
						t.Fatalf("Settle to %d: %v", s.cost, err)
					}
				}
				got := used(t, lim, tenant)
				if got[0] != 0 {
					t.Fatalf("used %v after settling requests of an ended window, want 0 in the main limit", got)
				}
				if c.quotas != nil && (got[1] != 20 || got[2] != 20) {
					// The day and the hour run on: 4, then 19 more, then 3 back.
					t.Fatalf("used %v, want the day and the hour charged 19 and given 3 back: 20 each", got)
				}
				d := takeExpect(t, lim, tenant, true, "")
				if d.Remaining != 4 && c.quotas == nil {
					t.Fatalf("the next request: remaining %d, want 4: a fresh window", d.Remaining)
				}
				takeExpect(t, lim, tenant, true, "")
				if err := lim.Settle(ctx, charged, 20); err != nil {
					t.Fatalf("Settle again: %v", err)
				}
				if got := used(t, lim, tenant)[0]; got != 2 {
					t.Fatalf("used %d after settling an old request in a running window, want 2", got)
				}
			})
		})
	}
}

// A sliding window's count weighs in the window after it, but a
// settlement once that window has begun changes nothing in it: neither
// the weight nor the new count. The request comes just after a window's
// start, and the settlement a quarter of a window into the next one: a
// fixed window has ended by then, a sliding one is weighed 75 % or less.
// (A settlement exactly one window later raced the fixed window's end.)
func TestSettleLeavesTheWindowBeforeAlone(t *testing.T) {
	const window = 400 * time.Millisecond
	eachTakeSubject(t, Options{Limit: 5, Window: window}, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		startOfWindow(t, lim, advance, window, 1)
		d := lim.TakeN(ctx, tenant, 4)
		if !d.Allowed {
			t.Fatalf("TakeN(4): %+v", d)
		}
		advance(window + window/4)
		before := used(t, lim, tenant)[0]
		if err := lim.Settle(ctx, d, 50); err != nil {
			t.Fatalf("Settle: %v", err)
		}
		if after := used(t, lim, tenant)[0]; after > before {
			t.Fatalf("used %d before settling a request of the window before at 50, %d after: want no more", before, after)
		}
	})
}

// A decision that took nothing is settled as a no-op; a cost below 0 and
// a non-zero cost of an InFlight decision are errors, as is another
// limiter's decision.
func TestSettleRefusesWhatItCannotSettle(t *testing.T) {
	ctx := context.Background()
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
	d := lim.Take(ctx, "acme")
	refused := lim.Take(ctx, "acme")
	if !d.Allowed || refused.Allowed {
		t.Fatalf("%+v %+v; want allowed, then refused", d, refused)
	}
	if err := lim.Settle(ctx, refused, 50); err != nil {
		t.Fatalf("Settle of a refusal: %v, want nil", err)
	}
	if err := lim.Settle(ctx, d, -3); err == nil || err.Error() != "ratelimit: Settle: cost -3 is below 0" {
		t.Fatalf("Settle to -3: %v, want an error naming the cost", err)
	}
	if got := used(t, lim, "acme")[0]; got != 1 {
		t.Fatalf("used %d, want 1: neither Settle changed anything", got)
	}
	other := NewLimiter(Options{Limit: 1, Window: time.Minute})
	if err := other.Settle(ctx, d, 5); err == nil || !strings.Contains(err.Error(), "another limiter") {
		t.Fatalf("Settle of another limiter's decision: %v", err)
	}

	shadow := NewLimiter(Options{Limit: 1, Window: time.Minute, Shadow: true, Logger: newLogRecorder().logger()})
	shadow.Take(ctx, "acme")
	shadowed := shadow.Take(ctx, "acme")
	if !shadowed.Shadowed {
		t.Fatalf("%+v, want shadowed", shadowed)
	}
	if err := shadow.Settle(ctx, shadowed, 50); err != nil || used(t, shadow, "acme")[0] != 1 {
		t.Fatalf("Settle of a shadowed refusal: %v, used %v; want nil and 1", err, used(t, shadow, "acme"))
	}
}

// An InFlight limiter holds slots, not costs: Settle to 0 gives the slots
// back, any other cost is an error that changes nothing.
func TestSettleInFlight(t *testing.T) {
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			c, clock := s.counter(t)
			o := Options{Counter: c, Limit: 2, Window: time.Minute, Algorithm: InFlight, Logger: newLogRecorder().logger()}
			var lim *Limiter
			if clock != nil {
				lim = newLimiter(o, clock.Now)
			} else {
				lim = NewLimiter(o)
			}
			ctx := context.Background()
			tenant := uniqueTenant(t)
			d := lim.TakeN(ctx, tenant, 2)
			if !d.Allowed {
				t.Fatalf("TakeN(2): %+v", d)
			}
			for _, cost := range []int{1, 2, 5} {
				err := lim.Settle(ctx, d, cost)
				if err == nil || !strings.Contains(err.Error(), "InFlight") || !strings.Contains(err.Error(), "slots, not costs") {
					t.Fatalf("Settle of an InFlight decision to %d: %v, want an error saying it holds slots", cost, err)
				}
			}
			if d := lim.Take(ctx, tenant); d.Allowed {
				t.Fatalf("%+v after the failed Settles, want refused: the slots are still held", d)
			}
			if err := lim.Settle(ctx, d, 0); err != nil {
				t.Fatalf("Settle to 0: %v", err)
			}
			if d := lim.TakeN(ctx, tenant, 2); !d.Allowed {
				t.Fatalf("%+v after Settle to 0, want allowed: the slots were given back", d)
			}
		})
	}
}

// Settling at the cost decided asks the store nothing; settling twice
// applies the difference twice, as the doc warns.
func TestSettleAsksTheStoreOnlyForADifference(t *testing.T) {
	store := &givesCounted{MemoryCounter: NewMemoryCounter()}
	lim := NewLimiter(Options{Counter: store, Limit: 100, Window: time.Minute})
	ctx := context.Background()
	d := lim.TakeN(ctx, "acme", 3)
	if err := lim.Settle(ctx, d, 3); err != nil || store.gives.Load() != 0 {
		t.Fatalf("Settle to the same cost: %v, %d calls of Give; want nil and none", err, store.gives.Load())
	}
	for range 2 {
		if err := lim.Settle(ctx, d, 10); err != nil {
			t.Fatalf("Settle to 10: %v", err)
		}
	}
	if got := used(t, lim, "acme")[0]; got != 17 || store.gives.Load() != 2 {
		t.Fatalf("used %d after settling 3 at 10 twice, %d calls of Give; want 3 + 7 + 7 = 17 and 2", got, store.gives.Load())
	}
}

// givesCounted is a MemoryCounter that counts its calls of Give.
type givesCounted struct {
	*MemoryCounter
	gives atomic.Int32
}

func (g *givesCounted) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	g.gives.Add(1)
	return g.MemoryCounter.Give(ctx, r, marks)
}

// A charge in the fallback counts in the fallback.
func TestSettleInTheFallback(t *testing.T) {
	lim := NewLimiter(Options{Limit: 10, Window: time.Minute, Counter: CounterStore(&scripted{err: errors.New("store down")}),
		Fallback: NewMemoryCounter(), Logger: newLogRecorder().logger()})
	ctx := context.Background()
	d := lim.Take(ctx, "acme")
	if d.By != ByFallback || !d.Allowed {
		t.Fatalf("%+v, want allowed by the fallback", d)
	}
	if err := lim.Settle(ctx, d, 10); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if d := lim.Take(ctx, "acme"); d.Allowed || d.By != ByFallback {
		t.Fatalf("after settling at 10: %+v, want refused by the fallback", d)
	}
}

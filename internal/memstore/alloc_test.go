package memstore

import (
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Take, Read and Give allocate nothing once a tenant's entry is made,
// whatever the budget counts: the limits are built on the stack from the
// Budget, and the counts go into the caller's Result.
func TestTakeReadGiveAllocateNothing(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	quotas := []store.Quota{{Name: "minute", Limit: 1 << 40, Window: time.Minute}, {Name: "month", Limit: 1 << 40, Calendar: store.Month}}
	budget := func(a store.Algorithm, qs []store.Quota) *store.Budget {
		return &store.Budget{Name: "default", Algorithm: a, Limit: 1 << 40, Window: time.Hour, Burst: 1 << 40, Quotas: qs}
	}
	for _, c := range []struct {
		name string
		b    *store.Budget
	}{
		{"fixed", budget(store.FixedWindow, nil)},
		{"sliding", budget(store.SlidingWindow, nil)},
		{"bucket", budget(store.TokenBucket, nil)},
		{"in flight", budget(store.InFlight, nil)},
		{"fixed with quotas", budget(store.FixedWindow, quotas)},
		{"sliding with quotas", budget(store.SlidingWindow, quotas)},
		{"bucket with quotas", budget(store.TokenBucket, quotas)},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &Store{}
			clock := newFakeClock()
			r := &store.Request{Budget: c.b, Key: []byte("rl:acme"), Cost: 2, Now: clock.Now(), Slot: 7}
			res := &store.Result{Counts: make([]store.Count, 1+len(c.b.Quotas))}
			var marks store.Marks
			take := func() {
				if err := m.Take(r, res); err != nil || !res.Allowed {
					t.Fatalf("Take: %v, allowed %v", err, res.Allowed)
				}
				for j := range res.Counts {
					marks[j] = res.Counts[j].Mark
				}
			}
			give := func() {
				if err := m.Give(r, marks); err != nil {
					t.Fatal(err)
				}
			}
			read := func() {
				if err := m.Read(r, res); err != nil {
					t.Fatal(err)
				}
			}
			charge := func() {
				r.Cost = -1
				give()
				r.Cost = 2
			}
			take() // the tenant's entry, made once
			give()
			for _, f := range []struct {
				name string
				run  func()
			}{
				{"Take and Give", func() { take(); give() }},
				{"Read", read},
				{"a charge", charge},
				{"Take", take}, // last: slots in flight pile up, never given back
			} {
				if n := testing.AllocsPerRun(200, f.run); n != 0 {
					t.Errorf("%s: %.1f allocations a call, want none", f.name, n)
				}
			}
		})
	}
}

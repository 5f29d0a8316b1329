package ratelimit

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatewaykit/ratelimit/store"
)

// featureStore is a MemoryCounter that declares only features f.
type featureStore struct {
	*MemoryCounter
	f store.Features
}

func (s featureStore) Attach(b *store.Budget, plans bool) (store.Info, error) {
	info, err := s.MemoryCounter.Attach(b, plans)
	info.Features = s.f
	return info, err
}

// NewLimiter refuses an option whose store does not declare the feature
// it needs, naming the option, the store's field and type, and the
// features it lacks; a store that declares them is taken.
func TestNewLimiterRefusesWhatAStoreDoesNotDecide(t *testing.T) {
	month := Quota{Name: "month", Limit: 100, Calendar: CalendarMonth}
	hour := Quota{Name: "hour", Limit: 50, Window: time.Hour}
	for _, c := range []struct {
		name  string
		opts  func(s store.Store) Options
		field string // of the store that lacks it
		need  store.Features
		msg   string // the panic starts with it
	}{
		{"sliding window", func(s store.Store) Options { return Options{Counter: s, Algorithm: SlidingWindow} },
			"Counter", store.SlidingWindows, "ratelimit: Algorithm: sliding window needs Counter"},
		{"token bucket", func(s store.Store) Options { return Options{Counter: s, Algorithm: TokenBucket} },
			"Counter", store.TokenBuckets, "ratelimit: Algorithm: token bucket needs Counter"},
		{"in flight", func(s store.Store) Options { return Options{Counter: s, Algorithm: InFlight} },
			"Counter", store.Slots, "ratelimit: Algorithm: in flight needs Counter"},
		{"quotas by window", func(s store.Store) Options { return Options{Counter: s, Quotas: []Quota{hour}} },
			"Counter", store.Quotas, "ratelimit: Quotas need Counter"},
		{"calendar quotas", func(s store.Store) Options { return Options{Counter: s, Quotas: []Quota{month}} },
			"Counter", store.Calendars, "ratelimit: Quotas need Counter"},
		{"leases", func(s store.Store) Options { return Options{Counter: s, Leases: true} },
			"Counter", store.Costs | store.GiveBack, "ratelimit: Leases need Counter"},
		{"a fallback's sliding window", func(s store.Store) Options {
			return Options{Algorithm: SlidingWindow, Fallback: s, FallbackLimit: 10}
		}, "Fallback", store.SlidingWindows, "ratelimit: Algorithm: sliding window needs Fallback"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := func(f store.Features) Options {
				o := c.opts(featureStore{NewMemoryCounter(), f})
				o.Limit, o.Window = 100, time.Minute
				return o
			}
			msg := panicOf(func() { NewLimiter(opts(store.All &^ c.need)) })
			if !strings.HasPrefix(msg, c.msg+" to decide "+c.need.String()+";") ||
				!strings.Contains(msg, "ratelimit.featureStore") || !strings.Contains(msg, "store.Info.Features") {
				t.Errorf("a store without %v: panic %q; want %q to decide %[1]v; naming ratelimit.featureStore and store.Info.Features",
					c.need, msg, c.msg)
			}
			if msg := panicOf(func() { NewLimiter(opts(c.need)) }); msg != "no panic" {
				t.Errorf("a store with just %v: panic %q; want none", c.need, msg)
			}
		})
	}
}

// What a store lacks at run time is refused before the store is asked:
// a cost, a read (Usage), a reset, a give-back, a wait; and a middleware
// that would need it panics at setup, naming its field.
func TestRequestsAStoreDoesNotDecideFailWithoutReachingIt(t *testing.T) {
	ctx := context.Background()
	plain := func(f store.Features) *Limiter {
		return NewLimiter(Options{Counter: featureStore{NewMemoryCounter(), f}, Limit: 10, Window: time.Minute})
	}
	lim := plain(0)
	if d := lim.Take(ctx, "acme"); !d.Allowed || d.By != ByCounter {
		t.Fatalf("a request of cost 1 on a store of no features: %+v; want allowed by the counter", d)
	}
	if d := lim.TakeN(ctx, "acme", 2); d.By == ByCounter || d.Err == nil || !strings.Contains(d.Err.Error(), "a cost of 2 needs Counter to decide costs") {
		t.Errorf("a cost of 2: By %v, Err %v; want not decided by the counter, and an error naming the cost", d.By, d.Err)
	}
	if _, err := lim.Usage(ctx, "acme"); err == nil || !strings.Contains(err.Error(), "Usage needs Counter to decide costs") {
		t.Errorf("Usage: %v; want an error that it needs costs", err)
	}
	if err := lim.Reset(ctx, "acme"); err == nil || !strings.Contains(err.Error(), "Reset needs Counter to decide resets") {
		t.Errorf("Reset: %v; want an error that it needs resets", err)
	}
	if err := lim.Release(ctx, lim.Take(ctx, "acme")); err == nil || !strings.Contains(err.Error(), "Settle and Release need Counter to decide give-back") {
		t.Errorf("Release: %v; want an error that it needs give-back", err)
	}
	if u, err := plain(store.Costs).Usage(ctx, "acme"); err != nil || len(u) != 1 {
		t.Errorf("Usage on a store that declares costs: %v, %v; want one limit's usage", u, err)
	}
	bucket := NewLimiter(Options{Counter: featureStore{NewMemoryCounter(), store.TokenBuckets}, Algorithm: TokenBucket,
		Limit: 10, Window: time.Second})
	if _, err := bucket.Wait(ctx, "acme"); err == nil || !strings.Contains(err.Error(), "a wait for a turn needs Counter to decide reservations") {
		t.Errorf("Wait: %v; want an error that it needs reservations", err)
	}
	for _, c := range []struct{ field, msg string }{
		{"Cost", panicOf(func() { FiberMiddleware(lim, Config{Cost: func(*fiber.Ctx) int { return 2 }}) })},
		{"CostAfter", panicOf(func() {
			HTTPMiddleware(lim, HTTPConfig{CostAfter: func(*http.Request, int, http.Header) int { return 2 }})
		})},
		{"SkipFailedRequests", panicOf(func() { FiberMiddleware(lim, Config{SkipFailedRequests: true}) })},
		{"MaxDelay", panicOf(func() { HTTPMiddleware(bucket, HTTPConfig{MaxDelay: time.Second}) })},
	} {
		if !strings.HasPrefix(c.msg, "ratelimit: "+c.field+": ") || !strings.Contains(c.msg, "store.Info.Features") {
			t.Errorf("a middleware's %s on a store without it: panic %q; want one naming %[1]s and store.Info.Features", c.field, c.msg)
		}
	}
}

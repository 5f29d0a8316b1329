package ratelimit_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
)

// job is a request of a transport of one's own, as a middleware built on
// ratelimit.Middleware reads it.
type job struct {
	tenant string
	cost   int
	status int // the handler's outcome
	spent  int // what the handler reports it really cost
}

// A middleware for a transport this module has no middleware for: decide,
// run the handler when allowed, then give back or settle.
func ExampleNewMiddleware() {
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 10, Window: time.Minute})
	m, err := ratelimit.NewMiddleware(lim, ratelimit.MiddlewareConfig[*job]{
		Tenant:             func(j *job) (string, bool) { return j.tenant, j.tenant != "" },
		Cost:               func(j *job) int { return j.cost },
		SkipFailedRequests: true,
		Status:             func(j *job, err error) int { return j.status },
	})
	if err != nil {
		panic(err)
	}
	serve := func(ctx context.Context, j *job, handler func(*job)) {
		d := m.Decide(ctx, j)
		if !d.Allowed {
			fmt.Printf("%s: refused, retry in %v\n", j.tenant, d.RetryAfter.Round(time.Second))
			return
		}
		handler(j)
		m.Done(ctx, j, &d, nil, false) // a failure is given back (SkipFailedRequests)
		fmt.Printf("%s: allowed, %d left; status %d\n", j.tenant, d.Remaining, j.status)
	}
	ok := func(j *job) { j.status = 200 }
	failed := func(j *job) { j.status = 503 }
	ctx := context.Background()
	serve(ctx, &job{tenant: "acme", cost: 4}, ok)
	serve(ctx, &job{tenant: "acme", cost: 4}, failed)
	serve(ctx, &job{tenant: "acme", cost: 4}, ok)
	serve(ctx, &job{tenant: "acme", cost: 4}, ok)
	// Output:
	// acme: allowed, 6 left; status 200
	// acme: allowed, 2 left; status 503
	// acme: allowed, 2 left; status 200
	// acme: refused, retry in 1m0s
}

// NewMiddleware's error names the field that is missing or that the
// Limiter cannot serve.
func TestNewMiddlewareNamesTheField(t *testing.T) {
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 10, Window: time.Minute})
	incrOnly := ratelimit.NewLimiter(ratelimit.Options{Limit: 10, Window: time.Minute, Counter: ratelimit.CounterStore(incrCounter{})})
	tenant := func(*job) (string, bool) { return "", false }
	for _, c := range []struct {
		name  string
		lim   *ratelimit.Limiter
		cfg   ratelimit.MiddlewareConfig[*job]
		words []string
	}{
		{"no limiter", nil, ratelimit.MiddlewareConfig[*job]{Tenant: tenant}, []string{"Limiter", "nil"}},
		{"no Tenant", lim, ratelimit.MiddlewareConfig[*job]{}, []string{"Tenant is nil"}},
		{"AnonymousByIP without ClientIP", lim, ratelimit.MiddlewareConfig[*job]{Tenant: tenant, AnonymousByIP: true}, []string{"ClientIP is nil", "AnonymousByIP"}},
		{"a skip rule without Status", lim, ratelimit.MiddlewareConfig[*job]{Tenant: tenant, SkipSuccessfulRequests: true}, []string{"Status is nil"}},
		{"Cost on a Counter that only counts by Incr", incrOnly, ratelimit.MiddlewareConfig[*job]{Tenant: tenant, Cost: func(*job) int { return 2 }}, []string{"Cost"}},
		{"MaxDelay on a fixed window", lim, ratelimit.MiddlewareConfig[*job]{Tenant: tenant, MaxDelay: time.Second}, []string{"MaxDelay", "TokenBucket"}},
	} {
		m, err := ratelimit.NewMiddleware(c.lim, c.cfg)
		if err == nil || m != nil {
			t.Errorf("%s: NewMiddleware = %v, %v; want an error", c.name, m, err)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(err.Error(), w) || !strings.HasPrefix(err.Error(), "ratelimit: ") {
				t.Errorf("%s: %q; want one that starts with ratelimit: and says %s", c.name, err, w)
			}
		}
	}
}

// incrCounter is a Counter and nothing more: fixed windows at a cost of 1.
type incrCounter struct{}

func (incrCounter) Incr(context.Context, string, time.Duration) (int64, error) { return 1, nil }

// Done gives back what a request took when a later middleware refused
// it, settles it at CostAfter's cost, and gives back an InFlight
// limiter's slots; a request without a tenant is keyed by its client's
// address when AnonymousByIP.
func TestMiddlewareDone(t *testing.T) {
	ctx := context.Background()
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 100, Window: time.Minute})
	m, err := ratelimit.NewMiddleware(lim, ratelimit.MiddlewareConfig[*job]{
		Tenant:        func(j *job) (string, bool) { return j.tenant, j.tenant != "" },
		AnonymousByIP: true,
		ClientIP:      func(*job) netip.Addr { return netip.MustParseAddr("192.0.2.7") },
		Cost:          func(j *job) int { return j.cost },
		CostAfter:     func(j *job) int { return j.spent },
	})
	if err != nil {
		t.Fatal(err)
	}
	used := func() int {
		us, err := lim.Usage(ctx, "acme")
		if err != nil {
			t.Fatalf("Usage: %v", err)
		}
		return us[0].Used
	}
	j := &job{tenant: "acme", cost: 5, spent: 5}
	d := m.Decide(ctx, j)
	m.Done(ctx, j, &d, nil, true)
	if n := used(); n != 0 {
		t.Errorf("a request a later middleware refused: %d used; want 0, given back", n)
	}
	j.spent = 12
	d = m.Decide(ctx, j)
	m.Done(ctx, j, &d, nil, false)
	if n := used(); n != 12 {
		t.Errorf("a request of cost 5 whose CostAfter is 12: %d used; want 12", n)
	}
	anon := &job{cost: 1}
	if d := m.Decide(ctx, anon); !d.Allowed || d.Remaining != 99 {
		t.Errorf("a request without a tenant: %+v; want it allowed, counted by its address alone", d)
	}
	if !m.GivesBack() || m.Holds() {
		t.Errorf("a fixed window's Middleware: GivesBack %v, Holds %v; want true, false", m.GivesBack(), m.Holds())
	}

	slots := ratelimit.NewLimiter(ratelimit.Options{Limit: 1, Window: time.Minute, Algorithm: ratelimit.InFlight})
	hm, err := ratelimit.NewMiddleware(slots, ratelimit.MiddlewareConfig[*job]{Tenant: func(j *job) (string, bool) { return j.tenant, true }})
	if err != nil {
		t.Fatal(err)
	}
	if !hm.Holds() {
		t.Fatal("an InFlight limiter's Middleware: Holds false")
	}
	for i := range 3 {
		j := &job{tenant: "acme"}
		d := hm.Decide(ctx, j)
		if !d.Allowed {
			t.Fatalf("request %d after the slot was given back: refused", i+1)
		}
		if d := hm.Decide(ctx, j); d.Allowed {
			t.Fatalf("request %d beside one holding the only slot: allowed", i+1)
		}
		hm.Done(ctx, j, &d, nil, false)
	}
}

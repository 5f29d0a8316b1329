package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// The operator's view of a tenant: what it has used of every limit, and a
// way to give it its whole budget back.

// Usage is what a tenant has used of one of its limits, as Limiter.Usage
// reports it.
type Usage struct {
	// Name is the limit's name, as the RateLimit header fields give it:
	// the limiter's policy name (Options.Name, or "default") for the main
	// limit, a quota's Name for a quota.
	Name string

	// Limit is the tenant's limit, by its plan.
	Limit int

	// Window is the limit's window, or for a calendar quota the length of
	// the period now running.
	Window time.Duration

	// Used is what the tenant has spent in the window or period: in a
	// sliding window, the weighted count that requests are decided
	// against, rounded up.
	Used int

	// Remaining is what a request may still spend now: Limit - Used, and
	// 0 once spent.
	Remaining int

	// Reset is how long until more than Remaining is available: the time
	// a fixed window has left (0 when none runs), until a calendar period
	// ends, or until a sliding window's count has fallen by one.
	Reset time.Duration
}

// MarshalJSON encodes u as what a gateway answers a tenant that asks for
// its usage. The object has the keys name, limit, used, remaining, window
// and reset. The last two are in whole seconds, rounded up as the
// RateLimit header fields round them:
//
//	{"name":"month","limit":100,"used":3,"remaining":97,"window":2678400,"reset":1209600}
//
// Usage has no UnmarshalJSON: the seconds are rounded, so the object does
// not give the Usage back. Decode it into a struct of one's own; decoded
// into a Usage, window and reset would be read as nanoseconds.
func (u Usage) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name      string `json:"name"`
		Limit     int    `json:"limit"`
		Used      int    `json:"used"`
		Remaining int    `json:"remaining"`
		Window    int64  `json:"window"`
		Reset     int64  `json:"reset"`
	}{u.Name, u.Limit, u.Used, u.Remaining, window.CeilDiv(u.Window, time.Second), window.CeilDiv(u.Reset, time.Second)})
}

// Usage returns what tenant has used of each of its limits, by its plan:
// the main one first, then its quotas in order. It spends nothing: it is
// one read of the store (a Take of cost 0; one script call on Redis). A
// request without a tenant is tenant "". It needs a store that decides
// costs (not a CounterStore). It waits for the store as ctx lets it, and
// as a request does: at most Options.StoreTimeout, and not at all while
// the breaker is open, when it returns the breaker's error.
func (l *Limiter) Usage(ctx context.Context, tenant string) ([]Usage, error) {
	r, err := l.tenantRequest(ctx, tenant)
	if err != nil {
		return nil, err
	}
	defer r.free()
	if lack := l.lacks("Usage needs", store.Costs, true); lack != nil {
		return nil, fmt.Errorf("ratelimit: %w (a read is a request of cost 0)", lack)
	}
	res, err := l.read(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: usage of tenant %s: %w", logTenant(tenant), err)
	}
	ls, n := window.Limits(r.Budget)
	us := make([]Usage, n)
	for j := range n {
		us[j] = usageOf(&ls[j], &res.Counts[j])
	}
	return us, nil
}

// usageOf is the Usage of limit l, whose count is c.
func usageOf(l *window.Limit, c *store.Count) Usage {
	st := *c
	u := Usage{Name: l.Name, Limit: int(l.Limit), Window: l.Window, Used: int(c.N)}
	switch {
	case l.Kind == store.TokenBucket && l.Calendar == 0:
		// The units the bucket holds now, and the time until it is full.
		u.Remaining, u.Reset = int(max(l.Burst-c.N, 0)), c.Left
		return u
	case l.Kind == store.SlidingWindow && l.Calendar == 0:
		s := l.Slide(&st)
		left := s.Remaining(l.Limit)
		u.Used, u.Remaining = int(window.CeilDuration(s.Estimate())), int(left)
		if u.Used > 0 {
			u.Reset = s.Until(float64(l.Limit - left - 1))
		}
		return u
	case l.Calendar != 0:
		u.Window, u.Reset = c.Length, c.Left
	case l.Kind == store.InFlight && c.N > 0:
		u.Reset = window.Retry
	case c.N > 0:
		u.Reset = c.Left
	}
	u.Remaining = int(max(l.Limit-c.N, 0))
	return u
}

// Reset clears tenant's counts in every limit of this limiter (by its
// plan: its quotas too), so that its next request has the whole budget: for
// support, or a new billing cycle. It clears the tenant in Options.Counter
// (on Redis, deleting its keys by name, scanning nothing, on a cluster
// too) and in Options.Fallback. This replica's over-limit cache, and what
// it remembers of the tenant's usage for the fallback, forget the tenant
// at once; another replica's cache refuses it for at most 10 seconds
// more, the longest an entry of the cache lasts, and its memory holds
// until the counter next answers it for the tenant. Requests in flight
// meanwhile may still count in the old windows.
func (l *Limiter) Reset(ctx context.Context, tenant string) error {
	r, err := l.tenantRequest(ctx, tenant)
	if err != nil {
		return err
	}
	defer r.free()
	if lack := l.lacks("Reset needs", store.Resets, true); lack != nil {
		return fmt.Errorf("ratelimit: %w", lack)
	}
	err = l.store.Reset(ctx, &r.Request)
	if l.refusals != nil {
		l.refusals.forget(r.Key)
	}
	if l.usage != nil {
		l.usage.forget(r.Key)
		if l.owed != nil {
			l.owed.Forget(r.Key)
		}
	}
	if l.fallback != nil {
		f := l.fallbackRequest(ctx, r)
		defer f.free()
		if ferr := l.fallback.Reset(ctx, &f.Request); err == nil {
			err = ferr
		}
	}
	if err != nil {
		return fmt.Errorf("ratelimit: reset of tenant %s: %w", logTenant(tenant), err)
	}
	return nil
}

// tenantRequest is a request of tenant's limits, by its plan, waiting as
// ctx lets it. Give it back with free.
func (l *Limiter) tenantRequest(ctx context.Context, tenant string) (*request, error) {
	r := l.newRequest(tenant, l.clock.Now())
	r.Deadline, _ = ctx.Deadline()
	if l.opts.PlanFor != nil {
		if err := l.plan(r); err != nil {
			r.free()
			return nil, err
		}
	}
	return r, nil
}

package ratelimit

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// A request on its way through a Limiter: what its store is asked (a
// store.Request, against the Budget of a plan), with room for its key
// and for the counts the store reports. The key is built once, when the
// request is made; every store, the over-limit cache, the leases and the
// fallback's memory read it from there.

// plan is a budget as a limiter keeps it: the Budget its store is asked
// with, its quotas prepared, and the same budget at the fallback's limits.
// A limiter makes one for itself and one for each distinct plan of
// PlanFor; a plan never changes once made, so that a store may know its
// Budget again by its pointer.
type plan struct {
	store.Budget
	set      *quotaSet // Budget.Quotas, prepared; nil for none
	fallback *plan     // at the fallback's limits; nil without a fallback
}

// request is one request of a tenant. Requests are pooled: a store is
// given pointers into one through an interface, which would otherwise put
// each request on the heap.
type request struct {
	store.Request
	plan   *plan
	addr   netip.Addr // a request without a tenant, keyed by its client's address
	byAddr bool
	res    store.Result
	counts [maxQuotas + 1]store.Count
	key    [maxKeyLen]byte
}

var requests = sync.Pool{New: func() any { return new(request) }}

// slotSeq names the slots of the process's requests in flight, one number
// each.
var slotSeq atomic.Uint64

// newRequest returns a request of tenant on the limiter's own plan, at a
// cost of 1, now, its key built. Give it back with free.
func (l *Limiter) newRequest(tenant string, now time.Time) *request {
	r := getRequest(l.own, tenant, now)
	r.Key = appendKey(r.key[:0], l.prefix, tenant, l.opts.Algorithm)
	return r
}

// newAddrRequest is newRequest for a request without a tenant, keyed by
// its client's address.
func (l *Limiter) newAddrRequest(addr netip.Addr, now time.Time) *request {
	r := getRequest(l.own, "", now)
	r.addr, r.byAddr = addr, true
	r.Key = appendAddrKey(r.key[:0], l.prefix, addr, l.opts.IPv6Prefix, l.opts.Algorithm)
	return r
}

// getRequest returns a request of tenant on plan p, at a cost of 1, now,
// its key not yet built: each maker builds it once.
func getRequest(p *plan, tenant string, now time.Time) *request {
	r := requests.Get().(*request)
	// Field by field: a composite literal would clear the whole request
	// first.
	r.Budget, r.plan, r.Tenant, r.Cost, r.Now = &p.Budget, p, tenant, 1, now
	r.Delay, r.Deadline, r.Slot, r.byAddr = 0, time.Time{}, 0, false
	return r
}

// clone returns a copy of r that shares its key, for a request made from
// it (the fallback's, a charge of turns). Free it before r.
func (r *request) clone() *request {
	c := requests.Get().(*request)
	c.Request, c.plan, c.addr, c.byAddr = r.Request, r.plan, r.addr, r.byAddr
	return c
}

// free gives r back to the pool. r and its key are not to be used after.
func (r *request) free() { requests.Put(r) }

// setPlan sets r's budget to p's.
func (r *request) setPlan(p *plan) { r.plan, r.Budget = p, &p.Budget }

// result returns r's result, cleared, its counts ready for r's limits.
func (r *request) result() *store.Result {
	n := 1 + len(r.Quotas)
	clear(r.counts[:n])
	r.res = store.Result{Counts: r.counts[:n]}
	return &r.res
}

// set is r's quotas, prepared; nil for none.
func (r *request) set() *quotaSet { return r.plan.set }

// onCalendar moves r's time to now on c's wall clock when a quota of r's
// plan counts in calendar periods, which follow the wall clock; r keeps
// its monotonic time otherwise.
func (r *request) onCalendar(c clock) {
	if s := r.set(); s != nil && s.calendar {
		r.Now = c.Now()
	}
}

// newPlan returns the plan of a budget of limit per window (a bucket's
// burst) with the quotas set, at the fallback's limits too when the
// limiter has a fallback.
func (l *Limiter) newPlan(limit int64, window time.Duration, burst int64, set *quotaSet) *plan {
	p := l.planAt(limit, window, burst, set)
	if l.opts.Fallback != nil {
		fburst := burst
		if burst != 0 {
			fburst = l.fallbackLimit(burst) // in the same proportion
		}
		p.fallback = l.planAt(l.fallbackLimit(limit), window, fburst, set.fallbackSet())
	}
	return p
}

// planAt is the plan of a budget, without a fallback's.
func (l *Limiter) planAt(limit int64, window time.Duration, burst int64, set *quotaSet) *plan {
	return &plan{set: set, Budget: store.Budget{Prefix: l.prefix, Name: l.policy.policy, Algorithm: l.opts.Algorithm,
		Limit: limit, Window: window, Burst: burst, Quotas: set.quotasOf()}}
}

// fallbackLimit is the fallback's budget for a request whose budget is
// limit: FallbackLimit, in the proportion of a tenant's plan to Limit.
func (l *Limiter) fallbackLimit(limit int64) int64 {
	if limit == int64(l.opts.Limit) {
		return int64(l.opts.FallbackLimit)
	}
	scaled := math.Ceil(float64(limit) * float64(l.opts.FallbackLimit) / float64(l.opts.Limit))
	return int64(min(max(scaled, 1), maxLimit))
}

// owedReq is what a debt keeps of the request that owes it (see
// Limiter.chargeOwed): its plan and its tenant. Its key is the debt's.
type owedReq struct {
	plan   *plan
	tenant string
}

func owedOf(r *request) owedReq { return owedReq{r.plan, r.Tenant} }

// request returns a request of o under key. Give it back with free.
func (o owedReq) request(key string, now time.Time) *request {
	r := getRequest(o.plan, o.tenant, now)
	r.Key = append(r.key[:0], key...)
	return r
}

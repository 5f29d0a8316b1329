package ratelimit

import (
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Quotas are further limits that a request is decided against together
// with its main one (Options.Limit per Options.Window, or its Plan's): "10
// requests a second, 10,000 a day, 1,000,000 a month". A request is
// allowed only when its cost fits in every limit, and a refused one spends
// nothing in any of them; the counter decides all of a tenant's limits in
// one step (one script call on Redis).

// Quota is a further limit on a tenant, beside the main one (see
// Options.Quotas). It allows Limit requests (or units of cost) per Window,
// or per period of the UTC calendar. Every request of the tenant is
// decided against the main limit and every quota together.
type Quota struct {
	// Name names the quota in the RateLimit header fields, in Usage and
	// in its keys. Required, unique within the limiter and other than
	// the limiter's own policy name (Options.Name, or "default"): at most
	// 64 bytes of visible ASCII without '"' or '\'.
	Name string

	// Limit is how many requests, or units of cost, the quota allows per
	// Window or Calendar period. Required: between 1 and 2^53.
	Limit int

	// Window is the quota's window, between 1ms and 24h, counted by
	// Options.Algorithm (FixedWindow or SlidingWindow) as the main limit
	// is. Exactly one of Window and Calendar is set: a longer period is a
	// Calendar.
	Window time.Duration

	// Calendar is the quota's period of the UTC calendar: CalendarDay,
	// CalendarWeek, CalendarMonth or CalendarYear. Exactly one of Window
	// and Calendar is set.
	Calendar Calendar
}

// Calendar is a period of the UTC calendar, for a Quota. The zero value
// is none. It is the store package's type, which stores count by.
type Calendar = store.Calendar

const (
	// CalendarDay is the UTC day: it starts at 00:00 UTC.
	CalendarDay Calendar = store.Day
	// CalendarMonth is the calendar month, of 28 to 31 days: it starts at
	// 00:00 UTC on its first day.
	CalendarMonth Calendar = store.Month
	// CalendarWeek is the ISO week, of 7 days: it starts at 00:00 UTC on
	// Monday.
	CalendarWeek Calendar = store.Week
	// CalendarYear is the calendar year, of 365 or 366 days: it starts at
	// 00:00 UTC on 1 January.
	CalendarYear Calendar = store.Year
)

// calendarNoun names c's period in a sentence: "per month".
func calendarNoun(c Calendar) string {
	switch c {
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "ISO week"
	case CalendarMonth:
		return "month"
	}
	return "year"
}

// maxQuotas is how many quotas a limiter, or a plan, may have.
const maxQuotas = 4

// quotaSet is a checked list of quotas, as a limiter or a plan has it, with
// what every request needs prepared once.
type quotaSet struct {
	// The quotas as a store takes them (store.Budget.Quotas), and each
	// name as an sf-string, for the headers.
	quotas []store.Quota
	quoted []string

	// The same quotas at the fallback's budgets (see
	// Limiter.fallbackLimit); nil without a fallback.
	fallback *quotaSet

	// The name of the limiter's own policy, the main limit's.
	policy string

	// The same quotas at a limit of 1, for Limiter.Ping.
	probe *quotaSet

	// Some quota counts in calendar periods, which follow the wall clock.
	calendar bool

	// The last items of RateLimit-Policy made (see policyItems).
	items atomic.Pointer[policyItems]
}

// newQuotaSet checks qs, the quotas of the field named field, for a
// limiter whose own policy is named policy, and prepares them. nil for
// none.
func newQuotaSet(field string, qs []Quota, policy string) (*quotaSet, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	if len(qs) > maxQuotas {
		return nil, fmt.Errorf("ratelimit: %s: at most %d quotas, got %d", field, maxQuotas, len(qs))
	}
	s := &quotaSet{policy: policy}
	for i, q := range qs {
		if err := q.check(); err != nil {
			return nil, fmt.Errorf("ratelimit: %s[%d]: %w", field, i, err)
		}
		if q.Name == policy {
			return nil, fmt.Errorf("ratelimit: %s[%d]: Name %q is the limiter's own policy name", field, i, q.Name)
		}
		for _, p := range qs[:i] {
			if p.Name == q.Name {
				return nil, fmt.Errorf("ratelimit: %s[%d]: Name %q is taken by another quota", field, i, q.Name)
			}
		}
		s.quotas = append(s.quotas, storeQuota(q))
		s.quoted = append(s.quoted, `"`+q.Name+`"`)
		s.calendar = s.calendar || q.Calendar != 0
	}
	s.probe = s.scaled(func(int64) int64 { return 1 })
	return s, nil
}

// scaled is s with each quota's limit scaled by scale.
func (s *quotaSet) scaled(scale func(int64) int64) *quotaSet {
	return s.capped(func(i int) int64 { return scale(s.quotas[i].Limit) })
}

// capped is s with quota i's limit set to limit(i).
func (s *quotaSet) capped(limit func(i int) int64) *quotaSet {
	c := &quotaSet{quotas: slices.Clone(s.quotas), quoted: s.quoted, policy: s.policy, calendar: s.calendar}
	for i := range c.quotas {
		c.quotas[i].Limit = limit(i)
	}
	return c
}

// quotasOf is s's quotas as a store takes them; nil for none.
func (s *quotaSet) quotasOf() []store.Quota {
	if s == nil {
		return nil
	}
	return s.quotas
}

// check returns why q cannot be a quota, or nil.
func (q Quota) check() error {
	switch {
	case q.Name == "":
		return fmt.Errorf("a quota needs a Name")
	case checkName(q.Name) != nil:
		return fmt.Errorf("quota Name: %w", checkName(q.Name))
	case q.Limit < 1 || q.Limit > maxLimit:
		return fmt.Errorf("quota %q: Limit must be between 1 and 2^53, got %d", q.Name, q.Limit)
	case q.Window != 0 && q.Calendar != 0, q.Window == 0 && q.Calendar == 0:
		return fmt.Errorf("quota %q: set exactly one of Window and Calendar", q.Name)
	case q.Window != 0 && windowOutOfBounds(q.Window) != "":
		return fmt.Errorf("quota %q: %s", q.Name, windowOutOfBounds(q.Window))
	case q.Calendar > CalendarYear:
		return fmt.Errorf("quota %q: Calendar must be CalendarDay, CalendarWeek, CalendarMonth or CalendarYear, got %d",
			q.Name, int(q.Calendar))
	}
	return nil
}

// withFallback adds to s its quotas at the fallback's budgets, scaled by
// scale (see Limiter.fallbackLimit).
func (s *quotaSet) withFallback(scale func(int64) int64) *quotaSet {
	if s == nil {
		return nil
	}
	s.fallback = s.scaled(scale)
	return s
}

// same reports whether qs is what s was made from.
func (s *quotaSet) same(qs []Quota) bool {
	if len(qs) != len(s.quotas) {
		return false
	}
	for i, q := range qs {
		if storeQuota(q) != s.quotas[i] {
			return false
		}
	}
	return true
}

// storeQuota is q as a store takes it.
func storeQuota(q Quota) store.Quota {
	return store.Quota{Name: q.Name, Limit: int64(q.Limit), Window: q.Window, Calendar: q.Calendar}
}

// planQuotas keeps the quota sets of the plans that PlanFor returns, so
// that a request is not charged for checking its plan's quotas again. They
// are found by a hash of what the quotas say and compared in full, so that
// a slice made anew for each request (a literal in PlanFor) finds its set
// as the plan's own slice does. Reads take no lock.
type planQuotas struct {
	sets atomic.Pointer[map[uint64]*quotaSet] // replaced, never changed
	mu   sync.Mutex                           // held to replace sets
}

// maxPlanQuotas bounds planQuotas: a gateway has a handful of plans.
const maxPlanQuotas = 256

// planSeed hashes plans' quotas.
var planSeed = maphash.MakeSeed()

func (p *planQuotas) get(qs []Quota, make func() (*quotaSet, error)) (*quotaSet, error) {
	var h maphash.Hash
	h.SetSeed(planSeed)
	for _, q := range qs {
		h.WriteString(q.Name)
		maphash.WriteComparable(&h, [3]int64{int64(q.Limit), int64(q.Window), int64(q.Calendar)})
	}
	k := h.Sum64()
	if m := p.sets.Load(); m != nil {
		if s, ok := (*m)[k]; ok && s.same(qs) {
			return s, nil
		}
	}
	s, err := make()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := map[uint64]*quotaSet{}
	if m := p.sets.Load(); m != nil && len(*m) < maxPlanQuotas {
		for k, v := range *m {
			next[k] = v
		}
	}
	next[k] = s
	p.sets.Store(&next)
	return s, nil
}

// figure is one limit's figures in a Decision, for the headers.
type figure struct {
	limit     int64
	window    time.Duration // a calendar period's length
	remaining int64
	reset     time.Duration
}

// neverFits reports whether cost passes one of s's limits, so that a
// request of cost is refused without asking the counter.
func (s *quotaSet) neverFits(cost int64) bool {
	for _, q := range s.quotas {
		if cost > q.Limit {
			return true
		}
	}
	return false
}

// fallbackSet is s at the fallback's budgets; nil for none.
func (s *quotaSet) fallbackSet() *quotaSet {
	if s == nil {
		return nil
	}
	return s.fallback
}

// probeSet is s at a limit of 1, for Limiter.Ping; nil for none.
func (s *quotaSet) probeSet() *quotaSet {
	if s == nil {
		return nil
	}
	return s.probe
}

// policyItems is a quotaSet's items of RateLimit-Policy for the limits and
// windows lims.
type policyItems struct {
	lims  [maxQuotas][2]int64
	items []byte
}

// planKey is what makes a plan: a budget of limit per window (a bucket's
// burst), with the quotas set.
type planKey struct {
	limit  int64
	window time.Duration
	burst  int64
	set    *quotaSet
}

// planCache keeps the plans made for PlanFor's budgets, one for each
// distinct budget, so that a store is asked with the same Budget every
// time. Reads take no lock.
type planCache struct {
	plans atomic.Pointer[map[planKey]*plan] // replaced, never changed
	mu    sync.Mutex                        // held to replace plans
}

// get returns the plan of k, made by build when it is new.
func (c *planCache) get(k planKey, build func(limit int64, window time.Duration, burst int64, set *quotaSet) *plan) *plan {
	if m := c.plans.Load(); m != nil {
		if p, ok := (*m)[k]; ok {
			return p
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[planKey]*plan{}
	if m := c.plans.Load(); m != nil {
		if p, ok := (*m)[k]; ok {
			return p
		}
		if len(*m) < maxPlanQuotas {
			maps.Copy(next, *m)
		}
	}
	p := build(k.limit, k.window, k.burst, k.set)
	next[k] = p
	c.plans.Store(&next)
	return p
}

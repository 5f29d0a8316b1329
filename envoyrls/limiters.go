package envoyrls

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
)

// Each rule is decided by a ratelimit.Limiter named after it. A Limiter
// lives as long as the server: a reload gives it the rule's new limits
// through its PlanFor, which reads them from the limiter's entry, so that
// its counts and its over-limit cache carry on. The library allows one
// budget per name on a store, and a Limiter's options cannot change, so
// the entries are kept by name and by the options that are fixed (leases,
// shadow mode); a rule whose algorithm changes has another name.

// everything is the main limit of a rule whose limits are all periods of
// the calendar: a day as long as the library's longest window allows, of
// more than any such rule could spend, so that only the rule's own
// limits, which are the limiter's quotas, ever refuse.
const everything = 1 << 53

// entry is the Limiter of one rule name, and the limits it decides by
// now, which its PlanFor gives every request.
type entry struct {
	lim  *ratelimit.Limiter
	plan atomic.Pointer[ratelimit.Plan]
}

// limiters holds the server's Limiters, by rule name and fixed options.
// Only Server.Load, one at a time, touches it.
type limiters struct {
	opts *Options
	by   map[string]*entry
}

// entryKey is what names an entry: a rule's name, and its options that
// a Limiter cannot change.
func entryKey(r *rule) string {
	return fmt.Sprintf("%s|leases=%t|shadow=%t", r.name, r.leases, r.shadow)
}

// prepare makes sure that every rule of rs that counts has its Limiter,
// and then, once every rule is known good, gives each its rule's limits,
// so that a configuration that does not load changes no limit. A rule
// that allows everything (unlimited) or blocks everything (a limit of 0)
// has no Limiter.
func (ls *limiters) prepare(rs *rules) error {
	plans := make([]ratelimit.Plan, len(rs.all))
	for i, r := range rs.all {
		if !counts(r) {
			continue
		}
		plans[i] = planOf(r)
		if err := checkPlan(r, plans[i]); err != nil {
			return err
		}
		e := ls.by[entryKey(r)]
		if e == nil {
			var err error
			if e, err = ls.newEntry(r, plans[i]); err != nil {
				return err
			}
		}
		r.entry = e // not yet published: the rules are new
	}
	for i, r := range rs.all {
		if r.entry != nil {
			r.entry.plan.Store(&plans[i])
		}
	}
	return nil
}

// newEntry makes the Limiter of r, whose first plan is plan, and keeps
// it. Setup panics of the library (a store that does not decide what
// the rule needs) are returned as errors.
func (ls *limiters) newEntry(r *rule, plan ratelimit.Plan) (e *entry, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("envoyrls: %s: %v", r.path, p)
		}
	}()
	e = new(entry)
	e.plan.Store(&plan)
	o := ls.opts
	var m *ratelimit.Metrics
	if o.Metrics != nil {
		m = new(ratelimit.Metrics)
	}
	e.lim = ratelimit.NewLimiter(ratelimit.Options{
		Counter: o.Store,
		Name:    r.name,
		// Every Limiter of one name has this budget of its own, whatever
		// its rule's limits, which its plan gives each request: the
		// library records one budget per name on a store, and a reload
		// that turns shadow_mode or leases makes a second Limiter of the
		// name. The budget decides only a request whose plan cannot be,
		// which a rule's never is (checkPlan): 1 a second, never
		// unlimited.
		Limit:           1,
		Window:          time.Second,
		Algorithm:       r.algorithm,
		PlanFor:         func(string) ratelimit.Plan { return *e.plan.Load() },
		Shadow:          r.shadow,
		FailClosed:      o.FailClosed,
		Logger:          o.Logger,
		StoreTimeout:    o.StoreTimeout,
		BreakerFailures: o.BreakerFailures,
		BreakerCooldown: o.BreakerCooldown,
		Fallback:        o.Fallback,
		Metrics:         m,
		Leases:          r.leases,
	})
	if m != nil {
		o.Metrics.Add(metricsName(r), m)
	}
	if ls.by == nil {
		ls.by = map[string]*entry{}
	}
	ls.by[entryKey(r)] = e
	return e, nil
}

// metricsName is the limiter label of r's metrics: its path, and the
// options that make it a limiter of its own.
func metricsName(r *rule) string {
	name := r.path
	if r.algorithm != ratelimit.FixedWindow {
		name += " (" + r.algorithm.String() + ")"
	}
	if r.shadow {
		name += " (shadow)"
	}
	if r.leases {
		name += " (leases)"
	}
	return name
}

// counts reports whether r is decided by a Limiter: not unlimited, and
// without a limit of 0, which refuses every request without asking.
func counts(r *rule) bool { return !r.unlimited && !blocks(r) }

// blocks reports whether one of r's limits is 0: requests_per_unit 0
// refuses every request that costs anything.
func blocks(r *rule) bool {
	for _, l := range r.limits {
		if l.perUnit == 0 {
			return true
		}
	}
	return false
}

// checkPlan returns why the library would not take plan for r, by
// building a Limiter of it on a store of its own: the library's setup
// checks are the one place its bounds are written.
func checkPlan(r *rule, plan ratelimit.Plan) (err error) {
	c := ratelimit.NewMemoryCounter()
	defer c.Close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("envoyrls: %s: %v", r.path, p)
		}
	}()
	ratelimit.NewLimiter(ratelimit.Options{
		Counter: c, Name: r.name, Algorithm: r.algorithm,
		Limit: plan.Limit, Window: plan.Window, Burst: plan.Burst, Quotas: plan.Quotas,
	})
	return nil
}

// planOf is the Plan that decides r: its first limit that counts in a
// window is the main limit (for a token bucket, rate_limit's, with its
// burst), every other limit a quota named by its unit. A rule whose
// limits are all periods of the calendar has a main limit that never
// refuses (everything per day).
func planOf(r *rule) ratelimit.Plan {
	main := -1
	for i, l := range r.limits {
		if _, ok := windowOf(r.algorithm, l.unit); ok {
			main = i
			break
		}
	}
	p := ratelimit.Plan{Limit: everything, Window: 24 * time.Hour, Quotas: []ratelimit.Quota{}}
	for i, l := range r.limits {
		if i == main {
			p.Window, _ = windowOf(r.algorithm, l.unit)
			p.Limit, p.Burst = int(l.perUnit), int(l.burst)
			continue
		}
		q := ratelimit.Quota{Name: unitName(l.unit), Limit: int(l.perUnit)}
		if w, ok := windowOf(ratelimit.FixedWindow, l.unit); ok {
			q.Window = w
		} else {
			q.Calendar = calendarOf(l.unit)
		}
		p.Quotas = append(p.Quotas, q)
	}
	return p
}

// windowOf is the window of unit for a main limit of algo: SECOND,
// MINUTE and HOUR, and DAY for a sliding window or a token bucket, whose
// windows have no calendar. For a fixed window a DAY is the UTC day, a
// period of the calendar.
func windowOf(algo ratelimit.Algorithm, unit rlsv3.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	switch unit {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second, true
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute, true
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour, true
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour, algo != ratelimit.FixedWindow
	}
	return 0, false
}

// calendarOf is the period of the calendar that unit names.
func calendarOf(unit rlsv3.RateLimitResponse_RateLimit_Unit) ratelimit.Calendar {
	switch unit {
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return ratelimit.CalendarWeek
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return ratelimit.CalendarMonth
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return ratelimit.CalendarYear
	}
	return ratelimit.CalendarDay
}

// unitName is the quota name of a limit of unit: "minute", "month".
func unitName(unit rlsv3.RateLimitResponse_RateLimit_Unit) string {
	return strings.ToLower(unit.String())
}

// limitOf is the limit of r that a Decision's Policy names: the main
// limit's, the limiter's own name, or a quota's, its unit's name.
func limitOf(r *rule, policy string) (limit, bool) {
	main := policy == r.name
	for _, l := range r.limits {
		_, window := windowOf(r.algorithm, l.unit)
		if main && window || !main && unitName(l.unit) == policy {
			return l, true
		}
	}
	return limit{}, false
}

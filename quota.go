package ratelimit

import (
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Quotas are further limits that a request is decided against together
// with its main one (Options.Limit per Options.Window, or its Plan's): "10
// requests a second, 10,000 a day, 1,000,000 a month". A request is
// allowed only when its cost fits in every limit, and a refused one spends
// nothing in any of them; the counter decides all of a tenant's limits in
// one step (one script call on Redis).

// Quota is a limit of Limit requests (or units of cost) per Window, or per
// period of the UTC calendar, that every request of a tenant is decided
// against together with the main limit (see Options.Quotas).
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
	// Options.Algorithm as the main limit is. Exactly one of Window and
	// Calendar is set.
	Window time.Duration

	// Calendar is the quota's period of the UTC calendar: CalendarDay or
	// CalendarMonth. Exactly one of Window and Calendar is set.
	Calendar Calendar
}

// Calendar is a period of the UTC calendar, for a Quota. The zero value
// is none.
type Calendar int

const (
	// CalendarDay is the UTC day: it starts at 00:00 UTC.
	CalendarDay Calendar = iota + 1
	// CalendarMonth is the calendar month, of 28 to 31 days: it starts at
	// 00:00 UTC on its first day.
	CalendarMonth
)

// String returns "day", "month" or "none".
func (c Calendar) String() string {
	switch c {
	case 0:
		return "none"
	case CalendarDay:
		return "day"
	case CalendarMonth:
		return "month"
	}
	return "Calendar(" + strconv.Itoa(int(c)) + ")"
}

// period returns the period of c that holds now: when it starts and when
// it ends, in UTC. The Redis script does the same arithmetic in Lua
// (calendarLua).
func (c Calendar) period(now time.Time) (start, end time.Time) {
	y, m, d := now.UTC().Date()
	if c == CalendarDay {
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
	start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// maxQuotas is how many quotas a limiter, or a plan, may have.
const maxQuotas = 4

// quotaSet is a checked list of quotas, as a limiter or a plan has it, with
// what every request needs prepared once.
type quotaSet struct {
	q   []quotaSpec
	src []Quota // what it was made from, for the cache of plans' quotas

	// The same quotas at the fallback's budgets (see
	// Limiter.fallbackLimit); nil without a fallback.
	fallback *quotaSet

	// The set's arguments to takeScript, which a script call gives once
	// for all its keys of the set, made once: [0] in fixed windows, [1] in
	// sliding ones (see scriptArgs).
	setArgs [2][]any

	// The name of the limiter's own policy, the main limit's.
	policy string

	// The quotas as a take's limits (see take.limits): [0] in fixed
	// windows, [1] in sliding ones.
	lims [2][]groupLimit

	// The same quotas at a limit of 1, for Limiter.Ping.
	probe *quotaSet

	// The last items of RateLimit-Policy made (see policyItems).
	items atomic.Pointer[policyItems]
}

// quotaSpec is one quota, prepared.
type quotaSpec struct {
	name     string // Quota.Name
	limit    int64
	window   time.Duration // 0 for a calendar period
	calendar Calendar
	quoted   string // the name as an sf-string
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
	s := &quotaSet{src: append([]Quota(nil), qs...), policy: policy}
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
		s.q = append(s.q, quotaSpec{name: q.Name, limit: int64(q.Limit), window: q.Window, calendar: q.Calendar,
			quoted: `"` + q.Name + `"`})
	}
	s.setArgs, s.lims = s.scriptArgs(), s.groupLimits()
	s.probe = s.scaled(func(int64) int64 { return 1 })
	return s, nil
}

// scaled is s with each quota's limit scaled by scale.
func (s *quotaSet) scaled(scale func(int64) int64) *quotaSet {
	f := &quotaSet{q: append([]quotaSpec(nil), s.q...), src: s.src, policy: s.policy}
	for i := range f.q {
		f.q[i].limit = scale(f.q[i].limit)
	}
	f.setArgs, f.lims = f.scriptArgs(), f.groupLimits()
	return f
}

// scriptArgs returns the arguments that describe s to takeScript: the
// main limit's kind (f a fixed window, s a sliding one) and name, how many
// quotas, and for each its kind (f, s, d a day, m a month), its limit in
// hexadecimal, its window in milliseconds (0 for a period) and its name.
func (s *quotaSet) scriptArgs() (set [2][]any) {
	for kind := range set {
		set[kind] = append(set[kind], kindOne[kind], s.policy, hexArg(int64(len(s.q))))
		for _, q := range s.q {
			k, ms := kindOne[kind], any(ceilDiv(q.window, time.Millisecond))
			switch q.calendar {
			case CalendarDay:
				k, ms = "d", int64(0)
			case CalendarMonth:
				k, ms = "m", int64(0)
			}
			set[kind] = append(set[kind], k, strconv.FormatInt(q.limit, 16), ms, q.name)
		}
	}
	return set
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
	case q.Window != 0 && (q.Window < minWindow || q.Window > maxWindow):
		return fmt.Errorf("quota %q: Window must be between %v and %v, got %v", q.Name, minWindow, maxWindow, q.Window)
	case q.Calendar < 0 || q.Calendar > CalendarMonth:
		return fmt.Errorf("quota %q: Calendar must be CalendarDay or CalendarMonth, got %d", q.Name, int(q.Calendar))
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

// signature is what two limiters sharing keys must agree on (see
// keyOwners): the quotas, in order.
func (s *quotaSet) signature() string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	for _, q := range s.q {
		fmt.Fprintf(&b, "%s=%d/%v%v;", q.name, q.limit, q.window, q.calendar)
	}
	return b.String()
}

// same reports whether qs is what s was made from.
func (s *quotaSet) same(qs []Quota) bool {
	if len(qs) != len(s.src) {
		return false
	}
	for i := range qs {
		if qs[i] != s.src[i] {
			return false
		}
	}
	return true
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

// limitAnswer is what a counter answered for one quota of a take.
type limitAnswer struct {
	allowed   bool          // the request's cost fits in it
	remaining int64         // units left after the decision
	reset     time.Duration // until one more unit than remaining is available
	retry     time.Duration // when it does not fit: until the cost would
	period    time.Duration // its window, or its calendar period's length
	slide     sliding       // a sliding window's key after the decision
	count     int64         // a fixed window's or a period's count after the decision
}

// decidedFixed fills in a's answer for a fixed window, or a calendar
// period, whose count is count after the decision, with left to run.
func (a *limitAnswer) decidedFixed(fits bool, limit, count int64, left time.Duration) {
	a.allowed, a.count, a.remaining, a.reset = fits, count, max(limit-count, 0), left
	a.retry = 0
	if !fits {
		a.retry = left
	}
}

// decidedSliding fills in a's answer from a sliding window's key.
func (a *limitAnswer) decidedSliding(fits bool, limit, cost int64, s sliding) {
	a.allowed, a.slide, a.remaining = fits, s, s.remaining(limit)
	a.reset, a.retry = s.resetAndRetry(limit, a.remaining, cost, fits)
}

// figure is one limit's figures in a Decision, for the headers and Usage.
type figure struct {
	limit     int64
	window    time.Duration // a calendar period's length
	remaining int64
	reset     time.Duration
}

// groupLimit is one of the limits a take with quotas is decided against:
// the main one first, then the quotas in order.
type groupLimit struct {
	name    string // "" for the main limit
	limit   int64
	window  time.Duration // 0 for a calendar period
	sliding bool          // counted in a sliding window
	cal     Calendar
}

// limits returns the limits t is decided against, the main one first, and
// how many there are.
func (t *take) limits() (ls [maxQuotas + 1]groupLimit, n int) {
	ls[0] = groupLimit{limit: t.limit, window: t.window, sliding: t.algo == SlidingWindow}
	if t.quotas == nil {
		return ls, 1
	}
	return ls, 1 + copy(ls[1:], t.quotas.lims[algoKind(t.algo)])
}

// groupLimits returns s's quotas as a take's limits, in fixed windows and
// in sliding ones.
func (s *quotaSet) groupLimits() (ls [2][]groupLimit) {
	for kind := range ls {
		for _, q := range s.q {
			ls[kind] = append(ls[kind], groupLimit{name: q.name, limit: q.limit, window: q.window,
				sliding: q.calendar == 0 && kind == 1, cal: q.calendar})
		}
	}
	return ls
}

// limitState is one limit's key at a decision, as a counter read it: a
// fixed window's or a period's count and time left (left, and for a
// period its length), or a sliding window's key.
type limitState struct {
	count  int64
	left   time.Duration
	period time.Duration
	slide  sliding // for a sliding window; its cur is count
}

// fits reports whether cost fits in l at s.
func (l *groupLimit) fits(s *limitState, cost int64) bool {
	if l.sliding {
		s.slide.cur = s.count
		return s.slide.fits(cost, l.limit)
	}
	return s.count+cost <= l.limit
}

// decideGroup fills in t's answer from its limits' states after the
// decision (a count includes the cost when the request was allowed), and
// which of them the cost fits in.
func (t *take) decideGroup(ls *[maxQuotas + 1]groupLimit, n int, st *[maxQuotas + 1]limitState, fits *[maxQuotas + 1]bool) {
	t.refusedBy = 0
	for j := range n {
		s, l := &st[j], &ls[j]
		if j == 0 {
			if l.sliding {
				s.slide.cur = s.count
				t.decidedSliding(fits[0], s.slide)
			} else {
				t.decided(fits[0], s.count, s.left)
			}
			continue
		}
		a := &t.q[j-1]
		if l.sliding {
			s.slide.cur = s.count
			a.decidedSliding(fits[j], l.limit, t.cost, s.slide)
			a.period = l.window
		} else {
			a.decidedFixed(fits[j], l.limit, s.count, s.left)
			a.period = l.window
			if l.cal != 0 {
				a.period = s.period
			}
		}
		if !fits[j] {
			t.refusedBy |= 1 << j
		}
	}
	t.allowed = t.refusedBy == 0
}

// neverFits reports whether cost passes one of s's limits, so that a
// request of cost is refused without asking the counter.
func (s *quotaSet) neverFits(cost int64) bool {
	for _, q := range s.q {
		if cost > q.limit {
			return true
		}
	}
	return false
}

// policyItems returns the items of RateLimit-Policy of s's quotas, each
// after ", ", for the figures lims (of a Decision: the main limit's
// first). They change only with the length of a calendar month, so the
// last ones made are kept.
func (s *quotaSet) policyItems(lims *[maxQuotas + 1]figure) []byte {
	if c := s.items.Load(); c != nil && c.lims == windowsOf(lims, len(s.q)) {
		return c.items
	}
	var b []byte
	for i, q := range s.q {
		f := &lims[i+1]
		b = appendPolicyItem(append(b, ", "...), q.quoted, f.limit, f.window)
	}
	s.items.Store(&policyItems{lims: windowsOf(lims, len(s.q)), items: b})
	return b
}

// policyItems is a quotaSet's items of RateLimit-Policy for the limits and
// windows lims.
type policyItems struct {
	lims  [maxQuotas][2]int64
	items []byte
}

// windowsOf is the quotas' limits and windows in lims.
func windowsOf(lims *[maxQuotas + 1]figure, n int) (w [maxQuotas][2]int64) {
	for i := range n {
		w[i] = [2]int64{lims[i+1].limit, int64(lims[i+1].window)}
	}
	return w
}

package ratelimit

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Metrics counts what a limiter does: its decisions, by how each ended and
// what decided it; the states of its circuit breakers (one per server of a
// cluster or ring); its round trips to the store, as a histogram of their
// latency; and the store's failures, by cause. Give a *Metrics to
// Options.Metrics and read it with Snapshot, for instance from the
// Prometheus collector of github.com/gatewaykit/ratelimit/prometheus. A
// decision costs one atomic add, on one of 16 copies of its counter, so
// that cores deciding requests at once seldom write to one cache line; a
// round trip to Redis costs two more adds and a reading of the clock. A
// Metrics belongs to one limiter: giving it to a second one panics. No
// figure is per tenant: tenants are unbounded, and a metric per tenant
// would be too.
type Metrics struct {
	attached  atomic.Bool
	decisions [decisionStripes]decisionCounts

	// The limiter's breakers, and those of them open and half-open; the
	// others are closed.
	breakers, open, halfOpen atomic.Int64

	// An InFlight limiter's slots: taken, refused and expired (see
	// MetricsSnapshot).
	slots [3]atomic.Uint64

	storeErrors [numCauses]atomic.Uint64
	latency     [len(LatencyBuckets) + 1]atomic.Uint64 // per bucket, the last past every bound
	latencySum  atomic.Int64                           // nanoseconds
}

// decisionStripes is how many copies of the decision counters a Metrics
// keeps, each in cache lines of its own. Every request adds to one of
// them: with one copy, each core that decides a request would first take
// the counter's cache line from the core that decided the one before. A
// goroutine adds to the copy that the address of its stack picks (see
// stripe), so goroutines that serve requests one after another on
// different cores mostly keep to different copies; Snapshot adds them up.
const (
	stripeBits      = 4
	decisionStripes = 1 << stripeBits
)

type decisionCounts struct {
	n [numOutcomes][numDeciders]atomic.Uint64
	_ [64]byte // keeps the next copy's counters a cache line away
}

// stripe is the copy of the decision counters for the calling goroutine:
// its stack's address, hashed. It may change when the stack grows, which
// only moves the goroutine to another copy.
func stripe() int {
	var here byte
	a := uint64(uintptr(unsafe.Pointer(&here)) >> 10)       // stacks are at least 2 KiB apart
	return int(a * 0x9e3779b97f4a7c15 >> (64 - stripeBits)) // the top bits pick one
}

// Outcome is how a decision ended.
type Outcome int

const (
	OutcomeAllowed       Outcome = iota // let through by a budget
	OutcomeLimited                      // refused: over the budget (429)
	OutcomeShadowLimited                // would have been refused, let through by Options.Shadow
	OutcomeFailedOpen                   // let through: nothing could count it
	OutcomeFailedClosed                 // refused: nothing could count it, and Options.FailClosed (503)
	numOutcomes
)

// String returns "allowed", "limited", "shadow-limited", "failed-open" or
// "failed-closed".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeLimited:
		return "limited"
	case OutcomeShadowLimited:
		return "shadow-limited"
	case OutcomeFailedOpen:
		return "failed-open"
	case OutcomeFailedClosed:
		return "failed-closed"
	}
	return "invalid"
}

// Cause is why a request's call to the store did not decide it: the
// store's failure, or, for CauseCanceled, the request's own.
type Cause int

const (
	CauseTimeout       Cause = iota // no answer within Options.StoreTimeout (10 × that while connecting)
	CauseRefused                    // the server could not be reached: a refused connection, a failed dial
	CauseConfiguration              // the server answered that it is set up wrong (NOAUTH, NOPERM, ...)
	CauseOther                      // any other failure of the store: a reset connection, an error reply
	// CauseCanceled: the request's own context ended (its client went
	// away, or its deadline passed) before the store answered. Not the
	// store's failure: it moves no breaker and is not logged as one.
	CauseCanceled
	numCauses
)

// String returns "timeout", "refused", "configuration", "other" or
// "canceled".
func (c Cause) String() string {
	switch c {
	case CauseTimeout:
		return "timeout"
	case CauseRefused:
		return "refused"
	case CauseConfiguration:
		return "configuration"
	case CauseOther:
		return "other"
	case CauseCanceled:
		return "canceled"
	}
	return "invalid"
}

// StoreErrors has a place for every Cause.
var _ [numCauses]uint64 = MetricsSnapshot{}.StoreErrors

// LatencyBuckets are the upper bounds, in seconds, of the store latency
// histogram's buckets.
var LatencyBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// MetricsSnapshot is a reading of Metrics. The counts only grow.
type MetricsSnapshot struct {
	// Every decision, by outcome and decider: the outcomes and deciders
	// that have counted any.
	Decisions []DecisionCount

	// Sums of Decisions.
	Allowed         uint64 // within budget, by the counter or the over-limit cache
	Limited         uint64 // over budget, by the counter or the over-limit cache
	FailedOpen      uint64 // let through: no counter could decide
	FailedClosed    uint64 // refused with 503: no counter could decide
	FallbackAllowed uint64 // within Options.FallbackLimit, by Options.Fallback
	FallbackLimited uint64 // over Options.FallbackLimit, by Options.Fallback
	ShadowLimited   uint64 // let through by Options.Shadow, that would have been refused

	// The breakers: one per server of a cluster or ring, else one.
	Breaker      BreakerState // open if any breaker is, else half-open if any is, else closed
	Breakers     int64        // the breakers made
	BreakersOpen int64        // of those, open
	BreakersHalf int64        // of those, half-open, probing their server

	// The store's failed round trips, by cause, and under CauseCanceled
	// the calls that the request's own context ended before the store
	// answered. A request decided while its breaker was open made none.
	StoreErrors [CauseCanceled + 1]uint64 // indexed by Cause

	// The store's round trips (those of a MemoryCounter are not timed).
	StoreLatency Histogram

	// The slots of an InFlight limiter, one per unit of cost: taken by
	// allowed requests; asked for by refused ones (shadow mode's would-be
	// refusals included); and expired, held by a request that never gave
	// them back before its lease (Window) ended: one still running, one
	// whose Release failed, or one of a replica that died. The counter
	// counts those when it drops them, on the tenant's next request
	// within a lease after the last one ended; a tenant that sends no
	// more requests by then leaves them uncounted.
	SlotsTaken, SlotsRefused, SlotsExpired uint64
}

// DecisionCount is how many decisions ended in Outcome, decided by By.
type DecisionCount struct {
	Outcome Outcome
	By      Decider
	Count   uint64
}

// Histogram is a latency histogram, as Prometheus has one: Counts[i] is
// how many observations were at most Buckets[i] seconds, Count how many
// there were in all, Sum their total in seconds.
type Histogram struct {
	Buckets []float64
	Counts  []uint64
	Count   uint64
	Sum     float64
}

// Snapshot reads the counts. It is safe to call at any time from any
// goroutine; the fields are read one by one, not as one atomic unit.
func (m *Metrics) Snapshot() MetricsSnapshot {
	var s MetricsSnapshot
	for o := range numOutcomes {
		for by := range numDeciders {
			var n uint64
			for i := range m.decisions {
				n += m.decisions[i].n[o][by].Load()
			}
			if n == 0 {
				continue
			}
			s.Decisions = append(s.Decisions, DecisionCount{o, by, n})
			switch {
			case o == OutcomeAllowed && by == ByFallback:
				s.FallbackAllowed += n
			case o == OutcomeAllowed:
				s.Allowed += n
			case o == OutcomeLimited && by == ByFallback:
				s.FallbackLimited += n
			case o == OutcomeLimited:
				s.Limited += n
			case o == OutcomeShadowLimited:
				s.ShadowLimited += n
			case o == OutcomeFailedOpen:
				s.FailedOpen += n
			case o == OutcomeFailedClosed:
				s.FailedClosed += n
			}
		}
	}
	s.Breakers, s.BreakersOpen, s.BreakersHalf = m.breakers.Load(), m.open.Load(), m.halfOpen.Load()
	switch {
	case s.BreakersOpen > 0:
		s.Breaker = BreakerOpen
	case s.BreakersHalf > 0:
		s.Breaker = BreakerHalfOpen
	}
	for c := range s.StoreErrors {
		s.StoreErrors[c] = m.storeErrors[c].Load()
	}
	h := &s.StoreLatency
	h.Buckets = LatencyBuckets[:]
	h.Counts = make([]uint64, len(LatencyBuckets))
	for i := range m.latency {
		n := m.latency[i].Load()
		h.Count += n
		if i < len(h.Counts) {
			h.Counts[i] = h.Count
		}
	}
	h.Sum = time.Duration(m.latencySum.Load()).Seconds()
	s.SlotsTaken, s.SlotsRefused, s.SlotsExpired = m.slots[0].Load(), m.slots[1].Load(), m.slots[2].Load()
	return s
}

// The recorders. A nil Metrics records nothing.

// decided records one decision.
func (m *Metrics) decided(o Outcome, by Decider) {
	if m != nil {
		m.decisions[stripe()].n[o][by].Add(1)
	}
}

// slotsDecided records an InFlight decision of n slots: taken, or
// refused.
func (m *Metrics) slotsDecided(n int64, taken bool) {
	if m == nil || n <= 0 {
		return
	}
	if taken {
		m.slots[0].Add(uint64(n))
	} else {
		m.slots[1].Add(uint64(n))
	}
}

// slotsExpired records n slots dropped when their lease had ended.
func (m *Metrics) slotsExpired(n int64) {
	if m != nil && n > 0 {
		m.slots[2].Add(uint64(n))
	}
}

// breakerMade records a new breaker, closed.
func (m *Metrics) breakerMade() {
	if m != nil {
		m.breakers.Add(1)
	}
}

// breakerChanged records that a breaker went from one state to another.
func (m *Metrics) breakerChanged(from, to BreakerState) {
	if m == nil {
		return
	}
	for _, c := range []struct {
		s BreakerState
		d int64
	}{{from, -1}, {to, 1}} {
		switch c.s {
		case BreakerOpen:
			m.open.Add(c.d)
		case BreakerHalfOpen:
			m.halfOpen.Add(c.d)
		}
	}
}

// canceled records a call to the store that the request's own context
// ended (ErrContextDone).
func (m *Metrics) canceled() {
	if m != nil {
		m.storeErrors[CauseCanceled].Add(1)
	}
}

// roundTrip records a round trip to the store that took d, and failed of
// cause unless ok.
func (m *Metrics) roundTrip(d time.Duration, ok bool, cause Cause) {
	if m == nil {
		return
	}
	i := 0
	for i < len(LatencyBuckets) && d.Seconds() > LatencyBuckets[i] {
		i++
	}
	m.latency[i].Add(1)
	m.latencySum.Add(int64(d))
	if !ok {
		m.storeErrors[cause].Add(1)
	}
}

package ratelimit

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/breaker"
)

// Metrics counts what a limiter does. It counts the decisions, by how
// each ended and what decided it; the states of the circuit breakers (one
// per server of a cluster or ring); the round trips to the store, as a
// histogram of their latency; and the store's failures, by cause. Give a *Metrics to
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

	// The keys whose usage the limiter remembers for its fallback, and
	// those dropped while live to stay within the bound (see
	// MetricsSnapshot).
	remembered        atomic.Int64
	rememberedEvicted atomic.Uint64

	// What the fallback admitted, owed to the store: the keys that owe,
	// those dropped while they owed, and the units charged and uncertain
	// (see MetricsSnapshot).
	owedKeys                             atomic.Int64
	owedEvicted, owedCharged, owedUnsure atomic.Uint64

	// Options.Leases: blocks claimed, units given back, units expired.
	leases [numLeaseCounts]atomic.Uint64

	storeErrors [numCauses]atomic.Uint64
	latency     [len(latencyBuckets) + 1]atomic.Uint64 // per bucket, the last past every bound
	latencySum  atomic.Int64                           // nanoseconds
	onRoundTrip atomic.Pointer[func(time.Duration)]    // see OnRoundTrip
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

// outcome is how a decision ended: its name in MetricsSnapshot.Decisions.
type outcome int

const (
	outcomeAllowed       outcome = iota // let through by a budget
	outcomeLimited                      // refused: over the budget (429)
	outcomeShadowLimited                // would have been refused, let through by Options.Shadow
	outcomeFailedOpen                   // let through: nothing could count it
	outcomeFailedClosed                 // refused: nothing could count it, and Options.FailClosed (503)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "limited", "shadow-limited", "failed-open", "failed-closed"}

// cause is why a request's call to the store did not decide it: the
// store's failure, or, for causeCanceled, the request's own.
type cause int

const (
	causeTimeout       cause = iota // no answer within Options.StoreTimeout
	causeRefused                    // the server could not be reached
	causeConfiguration              // the server answered that it is set up wrong
	causeOther                      // any other failure of the store
	causeCanceled                   // the request's own context ended first
	numCauses
)

// latencyBuckets are the upper bounds, in seconds, of the store latency
// histogram's buckets.
var latencyBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// MetricsSnapshot is a reading of Metrics. The counts only grow.
type MetricsSnapshot struct {
	// Every decision, by outcome and decider: every pair, those that
	// counted none too, always in one order (outcome by outcome as listed
	// here, each by decider in Decider's order). The outcomes are
	// "allowed", "limited" (over the budget: 429),
	// "shadow-limited" (would have been refused, let through by
	// Options.Shadow), "failed-open" (let through: nothing could count
	// it) and "failed-closed" (refused with 503: nothing could count it,
	// and Options.FailClosed).
	Decisions []DecisionCount

	// Sums of Decisions.
	Allowed         uint64 // within budget, by the counter or the over-limit cache
	Limited         uint64 // over budget, by the counter or the over-limit cache
	FailedOpen      uint64 // let through: no counter could decide
	FailedClosed    uint64 // refused with 503: no counter could decide
	FallbackAllowed uint64 // within Options.FallbackLimit, by Options.Fallback
	FallbackLimited uint64 // over Options.FallbackLimit, by Options.Fallback
	ShadowLimited   uint64 // let through by Options.Shadow, that would have been refused

	// The breakers: one per server of a cluster or ring, else one. A
	// breaker opens after Options.BreakerFailures failures of the store
	// in a row, and decides requests without the store until
	// Options.BreakerCooldown has passed; then one request probes the
	// store (half-open), and its success closes the breaker.
	Breaker      string // "open" if any breaker is, else "half-open" if any is, else "closed"
	Breakers     int64  // the breakers made
	BreakersOpen int64  // of those, open
	BreakersHalf int64  // of those, half-open, probing their server

	// The store's failed round trips, by cause, and under Canceled the
	// calls that the request's own context ended (its client went away,
	// or its deadline passed) before the store answered: not the store's
	// failure, which moves no breaker and is not logged as one. A request
	// decided while its breaker was open made none.
	StoreErrors struct {
		Timeout       uint64 // no answer within Options.StoreTimeout (10 × that while connecting)
		Refused       uint64 // the server could not be reached: a refused connection, a failed dial
		Configuration uint64 // the server answered that it is set up wrong (NOAUTH, NOPERM, ...)
		Other         uint64 // any other failure: a reset connection, an error reply
		Canceled      uint64 // the request's own context ended first
	}

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

	// What a limiter with a Fallback remembers of its tenants' usage, so
	// that the fallback decides from it (see Options.Fallback): the keys
	// it holds now, and those it dropped while they still held, to stay
	// within its bound (the Fallback's MaxKeys), each of whose tenants
	// the fallback then decides from zero. A count that grows says that
	// the bound is too small for the tenants.
	Remembered        int64
	RememberedEvicted uint64

	// What the fallback admitted while the store failed, which the
	// limiter charges to the store when it answers again (see
	// Options.Fallback): the keys that owe now; those dropped while they
	// owed, to stay within the bound, whose admissions go uncharged; the
	// units charged (a request's cost once, whatever its quotas); and the
	// units whose charge failed in a way that may have reached the store,
	// which is not sent again, so as never to count twice.
	OwedKeys                             int64
	OwedEvicted, OwedCharged, OwedUnsure uint64

	// With Options.Leases: the blocks of hot tenants' budgets that the
	// limiter claimed from the store; the units of them it gave back
	// while their windows lasted (a block left unspent for a while); and
	// the units that expired unspent with their windows (or, for a
	// token bucket, their arrival times), which no replica could spend:
	// the under-admission that leases cost.
	LeaseBlocks, LeaseUnitsGivenBack, LeaseUnitsExpired uint64
}

// DecisionCount is how many decisions ended in Outcome, decided by By.
type DecisionCount struct {
	Outcome string // see MetricsSnapshot.Decisions
	By      Decider
	Count   uint64
}

// Histogram is a latency histogram, as Prometheus has one. Counts[i] is
// how many observations were at most Buckets[i] seconds. Count is how
// many there were in all, and Sum their total in seconds.
type Histogram struct {
	Buckets []float64
	Counts  []uint64
	Count   uint64
	Sum     float64
}

// Snapshot reads the counts. It is safe to call at any time from any
// goroutine; the fields are read one by one, not as one atomic unit.
func (m *Metrics) Snapshot() MetricsSnapshot {
	s := MetricsSnapshot{Decisions: make([]DecisionCount, 0, int(numOutcomes)*int(numDeciders))}
	for o := range numOutcomes {
		for by := range numDeciders {
			var n uint64
			for i := range m.decisions {
				n += m.decisions[i].n[o][by].Load()
			}
			s.Decisions = append(s.Decisions, DecisionCount{outcomeNames[o], by, n})
			switch {
			case o == outcomeAllowed && by == ByFallback:
				s.FallbackAllowed += n
			case o == outcomeAllowed:
				s.Allowed += n
			case o == outcomeLimited && by == ByFallback:
				s.FallbackLimited += n
			case o == outcomeLimited:
				s.Limited += n
			case o == outcomeShadowLimited:
				s.ShadowLimited += n
			case o == outcomeFailedOpen:
				s.FailedOpen += n
			case o == outcomeFailedClosed:
				s.FailedClosed += n
			}
		}
	}
	s.Breakers, s.BreakersOpen, s.BreakersHalf = m.breakers.Load(), m.open.Load(), m.halfOpen.Load()
	s.Breaker = breaker.Closed.String()
	switch {
	case s.BreakersOpen > 0:
		s.Breaker = breaker.Open.String()
	case s.BreakersHalf > 0:
		s.Breaker = breaker.HalfOpen.String()
	}
	e := &s.StoreErrors
	e.Timeout, e.Refused = m.storeErrors[causeTimeout].Load(), m.storeErrors[causeRefused].Load()
	e.Configuration, e.Other = m.storeErrors[causeConfiguration].Load(), m.storeErrors[causeOther].Load()
	e.Canceled = m.storeErrors[causeCanceled].Load()
	h := &s.StoreLatency
	h.Buckets = latencyBuckets[:]
	h.Counts = make([]uint64, len(latencyBuckets))
	for i := range m.latency {
		n := m.latency[i].Load()
		h.Count += n
		if i < len(h.Counts) {
			h.Counts[i] = h.Count
		}
	}
	h.Sum = time.Duration(m.latencySum.Load()).Seconds()
	s.SlotsTaken, s.SlotsRefused, s.SlotsExpired = m.slots[0].Load(), m.slots[1].Load(), m.slots[2].Load()
	s.Remembered, s.RememberedEvicted = m.remembered.Load(), m.rememberedEvicted.Load()
	s.OwedKeys, s.OwedEvicted = m.owedKeys.Load(), m.owedEvicted.Load()
	s.OwedCharged, s.OwedUnsure = m.owedCharged.Load(), m.owedUnsure.Load()
	s.LeaseBlocks, s.LeaseUnitsGivenBack = m.leases[leaseBlocks].Load(), m.leases[leaseGivenBack].Load()
	s.LeaseUnitsExpired = m.leases[leaseExpired].Load()
	return s
}

// OnRoundTrip makes m call f with the latency of each round trip to the
// store, after counting it, for a histogram that another library keeps:
// OpenTelemetry's cannot read m's. f runs on the request's goroutine, so
// it must be quick and safe for concurrent use. It misses the round trips
// made before the call, and a MemoryCounter's, which are not timed.
// OnRoundTrip panics when f is nil, or when m already has one.
func (m *Metrics) OnRoundTrip(f func(time.Duration)) {
	if f == nil || !m.onRoundTrip.CompareAndSwap(nil, &f) {
		panic("ratelimit: Metrics.OnRoundTrip called twice, or with a nil func")
	}
}

// The recorders. A nil Metrics records nothing.

// decided records one decision.
func (m *Metrics) decided(o outcome, by Decider) {
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

// rememberedChanged records keys remembered for the fallback: held more
// by delta, and evicted more dropped while they held.
func (m *Metrics) rememberedChanged(delta int64, evicted uint64) {
	if m == nil {
		return
	}
	m.remembered.Add(delta)
	if evicted > 0 {
		m.rememberedEvicted.Add(evicted)
	}
}

// owedChanged records keys that owe the store what the fallback admitted:
// held more by delta, and evicted more dropped while they owed.
func (m *Metrics) owedChanged(delta int64, evicted uint64) {
	if m == nil {
		return
	}
	m.owedKeys.Add(delta)
	if evicted > 0 {
		m.owedEvicted.Add(evicted)
	}
}

// owedSettled records units charged to the store, and units whose charge
// may or may not have reached it.
func (m *Metrics) owedSettled(charged, unsure int64) {
	if m == nil {
		return
	}
	if charged > 0 {
		m.owedCharged.Add(uint64(charged))
	}
	if unsure > 0 {
		m.owedUnsure.Add(uint64(unsure))
	}
}

// What Options.Leases counts: see MetricsSnapshot.LeaseBlocks.
const (
	leaseBlocks = iota
	leaseGivenBack
	leaseExpired
	numLeaseCounts
)

// leased adds n to the lease count c.
func (m *Metrics) leased(c int, n int64) {
	if m != nil && n > 0 {
		m.leases[c].Add(uint64(n))
	}
}

// breakerMade records a new breaker, closed.
func (m *Metrics) breakerMade() {
	if m != nil {
		m.breakers.Add(1)
	}
}

// breakerChanged records that a breaker went from one state to another.
func (m *Metrics) breakerChanged(from, to breaker.State) {
	if m == nil {
		return
	}
	for _, c := range []struct {
		s breaker.State
		d int64
	}{{from, -1}, {to, 1}} {
		switch c.s {
		case breaker.Open:
			m.open.Add(c.d)
		case breaker.HalfOpen:
			m.halfOpen.Add(c.d)
		}
	}
}

// canceled records a call to the store that the request's own context
// ended (ErrContextDone).
func (m *Metrics) canceled() {
	if m != nil {
		m.storeErrors[causeCanceled].Add(1)
	}
}

// roundTrip records a round trip to the store that took d, and failed of
// cause unless ok.
func (m *Metrics) roundTrip(d time.Duration, ok bool, c cause) {
	if m == nil {
		return
	}
	i := 0
	for i < len(latencyBuckets) && d.Seconds() > latencyBuckets[i] {
		i++
	}
	m.latency[i].Add(1)
	m.latencySum.Add(int64(d))
	if !ok {
		m.storeErrors[c].Add(1)
	}
	if f := m.onRoundTrip.Load(); f != nil {
		(*f)(d)
	}
}

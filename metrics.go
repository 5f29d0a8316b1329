package ratelimit

import "sync/atomic"

// Metrics counts a limiter's decisions. Give a *Metrics to Options.Metrics
// and read it with Snapshot, for instance from a Prometheus collector (see
// examples/gateway). Each request costs one atomic add. A Metrics belongs to
// one handler: giving it to a second one panics.
type Metrics struct {
	attached atomic.Bool
	counts   [numOutcomes]atomic.Uint64
	// The limiter's breakers (one per node of a cluster or ring) that are
	// open and half-open; the others are closed.
	open, halfOpen atomic.Int64
}

type outcome int

const (
	allowed outcome = iota
	limited
	failedOpen
	failedClosed
	fallbackAllowed
	fallbackLimited
	shadowLimited
	numOutcomes
)

// MetricsSnapshot is a reading of Metrics. The counts only grow.
type MetricsSnapshot struct {
	Allowed         uint64       // within budget, by the counter
	Limited         uint64       // over budget, by the counter
	FailedOpen      uint64       // let through: no counter could decide
	FailedClosed    uint64       // refused with 503: no counter could decide
	FallbackAllowed uint64       // within Options.FallbackLimit, by Options.Fallback
	FallbackLimited uint64       // over Options.FallbackLimit, by Options.Fallback
	ShadowLimited   uint64       // let through by Options.Shadow, that would have been refused
	Breaker         BreakerState // open if any breaker is, else half-open if any is, else closed
	BreakersOpen    int64        // breakers open: one per node (cluster primary, ring shard) that fails
	BreakersHalf    int64        // breakers half-open, probing their node
}

// Snapshot reads the counts. It is safe to call at any time from any
// goroutine; the fields are read one by one, not as one atomic unit.
func (m *Metrics) Snapshot() MetricsSnapshot {
	s := MetricsSnapshot{
		Allowed:         m.counts[allowed].Load(),
		Limited:         m.counts[limited].Load(),
		FailedOpen:      m.counts[failedOpen].Load(),
		FailedClosed:    m.counts[failedClosed].Load(),
		FallbackAllowed: m.counts[fallbackAllowed].Load(),
		FallbackLimited: m.counts[fallbackLimited].Load(),
		ShadowLimited:   m.counts[shadowLimited].Load(),
		BreakersOpen:    m.open.Load(),
		BreakersHalf:    m.halfOpen.Load(),
	}
	switch {
	case s.BreakersOpen > 0:
		s.Breaker = BreakerOpen
	case s.BreakersHalf > 0:
		s.Breaker = BreakerHalfOpen
	}
	return s
}

// breakerChanged records that a breaker went from one state to another; a
// nil Metrics records nothing.
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

// count records one decision; a nil Metrics records nothing.
func (m *Metrics) count(o outcome) {
	if m != nil {
		m.counts[o].Add(1)
	}
}

package ratelimit

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// breakers is a limiter's circuit breakers: one for each server of a
// store that has several (StoreInfo.Server), made as requests meet the
// servers, or one for the store.
type breakers struct {
	first  *breaker                   // node 0's, or the counter's
	more   atomic.Pointer[[]*breaker] // by node number; replaced, never changed
	mu     sync.Mutex                 // held to replace more
	newOne func(addr string) *breaker
}

func newBreakers(newOne func(addr string) *breaker) *breakers {
	bs := &breakers{first: newOne(""), newOne: newOne}
	bs.more.Store(&[]*breaker{bs.first})
	return bs
}

// of returns the breaker of node id, at addr.
func (bs *breakers) of(id int, addr string) *breaker {
	if id == 0 {
		return bs.first
	}
	if l := *bs.more.Load(); id < len(l) && l[id] != nil {
		return l[id]
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	old := *bs.more.Load()
	if id < len(old) && old[id] != nil {
		return old[id]
	}
	l := make([]*breaker, max(len(old), id+1))
	copy(l, old)
	l[id] = bs.newOne(addr)
	bs.more.Store(&l)
	return l[id]
}

// breaker stops a limiter from calling a failing counter, or one failing
// node of it. While it is closed it costs an atomic load per request, and
// a second one after a failure.
//
// Its log tells an outage as one story, however long: a line when it opens
// and one when it closes again, with how long it was open and how many
// probes failed meanwhile. Going half-open and back to open is in the
// metrics; a failed probe's error is in the limiter's throttled line about
// the counter's failures.
type breaker struct {
	threshold int64
	cooldown  time.Duration
	clock     clock
	log       func(level slog.Level, msg string, attrs ...slog.Attr)
	metrics   *Metrics
	node      string // the address of the breaker's node, for the log; "" for the whole counter

	state    atomic.Int32
	failures atomic.Int64  // consecutive failures while closed
	openedAt atomic.Int64  // nanoseconds since the clock's epoch, of the last opening
	lastTrip atomic.Uint64 // the last sharedFailure counted

	// Since it last closed: when it opened first, and the probes that
	// failed.
	outageAt     atomic.Int64
	failedProbes atomic.Int64
}

func newBreaker(threshold int, cooldown time.Duration, clk clock, log func(slog.Level, string, ...slog.Attr), m *Metrics, node string) *breaker {
	m.breakerMade()
	return &breaker{threshold: int64(threshold), cooldown: cooldown, clock: clk, log: log, metrics: m, node: node}
}

// allow reports whether a request may call the counter, and whether it is
// the half-open probe, whose outcome decides the next state.
func (b *breaker) allow() (ok, probe bool) {
	switch breakerState(b.state.Load()) {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if b.since(b.openedAt.Load()) < b.cooldown ||
			!b.state.CompareAndSwap(int32(breakerOpen), int32(breakerHalfOpen)) {
			return false, false
		}
		b.metrics.breakerChanged(breakerOpen, breakerHalfOpen)
		return true, true
	}
	return false, false // half-open: the probe is out
}

func (b *breaker) since(t int64) time.Duration {
	return b.clock.elapsed() - time.Duration(t)
}

// success records a counter call that worked.
func (b *breaker) success(probe bool) {
	if probe {
		b.failures.Store(0)
		b.state.Store(int32(breakerClosed))
		b.metrics.breakerChanged(breakerHalfOpen, breakerClosed)
		b.say(slog.LevelInfo, "ratelimit: circuit breaker closed",
			slog.Duration("open for", b.since(b.outageAt.Load())), slog.Int64("failed probes", b.failedProbes.Load()))
		return
	}
	if b.failures.Load() != 0 { // a load, not a store, on the hot path
		b.failures.Store(0)
	}
}

// failure records a counter call that failed with err.
func (b *breaker) failure(probe bool, err error) {
	if probe {
		b.failedProbes.Add(1)
		b.open(breakerHalfOpen)
		return
	}
	if t, ok := errors.AsType[sharedFailure](err); ok && b.lastTrip.Swap(t.RoundTrip()) == t.RoundTrip() {
		// The requests that shared one failed round trip are one failure:
		// another of them counted it.
		return
	}
	n := b.failures.Add(1)
	if n >= b.threshold && b.open(breakerClosed) {
		b.outageAt.Store(b.openedAt.Load())
		b.failedProbes.Store(0)
		b.say(slog.LevelError, "ratelimit: circuit breaker open",
			slog.Int64("failures in a row", n), slog.Any("err", err), slog.Duration("probe every", b.cooldown))
	}
}

// abandoned records that a call ended without the counter's answer or
// failure: its request's context ended first. That says nothing of the
// counter; a probe that ends so leaves the breaker open, for the next
// request to probe at once.
func (b *breaker) abandoned(probe bool) {
	if probe && b.state.CompareAndSwap(int32(breakerHalfOpen), int32(breakerOpen)) {
		b.metrics.breakerChanged(breakerHalfOpen, breakerOpen)
	}
}

// open opens the breaker from the state from, and reports whether this
// call did.
func (b *breaker) open(from breakerState) bool {
	if breakerState(b.state.Load()) != from {
		return false // another request opened it
	}
	// The time is stored before the state, so that no request sees the new
	// state with an old time; two requests opening at once both store it.
	b.openedAt.Store(int64(b.clock.elapsed()))
	if !b.state.CompareAndSwap(int32(from), int32(breakerOpen)) {
		return false
	}
	b.metrics.breakerChanged(from, breakerOpen)
	return true
}

// say writes a line about the breaker, naming its node.
func (b *breaker) say(level slog.Level, msg string, attrs ...slog.Attr) {
	if b.node != "" {
		attrs = append(attrs, slog.String("node", b.node))
	}
	b.log(level, msg, attrs...)
}

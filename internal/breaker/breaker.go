// Package breaker is the limiter's circuit breakers: one for each server
// of a store that has several, or one for the store.
package breaker

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Set is a limiter's circuit breakers: one for each server of a store
// that has several (store.Info.Server), made as requests meet the
// servers, or one for the store.
type Set struct {
	First  *Breaker                   // node 0's, or the counter's
	more   atomic.Pointer[[]*Breaker] // by node number; replaced, never changed
	mu     sync.Mutex                 // held to replace more
	newOne func(addr string) *Breaker
}

// NewSet returns a set whose breakers newOne makes.
func NewSet(newOne func(addr string) *Breaker) *Set {
	bs := &Set{First: newOne(""), newOne: newOne}
	bs.more.Store(&[]*Breaker{bs.First})
	return bs
}

// Of returns the breaker of node id, at addr.
func (bs *Set) Of(id int, addr string) *Breaker {
	if id == 0 {
		return bs.First
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
	l := make([]*Breaker, max(len(old), id+1))
	copy(l, old)
	l[id] = bs.newOne(addr)
	bs.more.Store(&l)
	return l[id]
}

// Breaker stops a limiter from calling a failing counter, or one failing
// node of it. While it is closed it costs an atomic load per request, and
// a second one after a failure.
//
// Its log tells an outage as one story, however long: a line when it opens
// and one when it closes again, with how long it was open and how many
// probes failed meanwhile. Going half-open and back to open is in the
// metrics; a failed probe's error is in the limiter's throttled line about
// the counter's failures.
type Breaker struct {
	threshold int64
	cooldown  time.Duration
	elapsed   func() time.Duration // the limiter's clock: the time since its epoch
	log       func(level slog.Level, msg string, attrs ...slog.Attr)
	changed   func(from, to State)
	node      string // the address of the breaker's node, for the log; "" for the whole counter

	state    atomic.Int32
	failures atomic.Int64  // consecutive failures while closed
	openedAt atomic.Int64  // nanoseconds since the clock's epoch, of the last opening
	lastTrip atomic.Uint64 // the last sharedFailure's round trip counted

	// Since it last closed: when it opened first, and the probes that
	// failed.
	outageAt     atomic.Int64
	failedProbes atomic.Int64

	// What the calls it turns away fail with: ErrOpen, with the failure
	// that last opened it.
	openErr atomic.Pointer[openError]
}

// ErrOpen is what a call that an open breaker turned away fails with
// (errors.Is finds it), the failure that opened the breaker being its
// cause.
var ErrOpen = errors.New("ratelimit: circuit breaker open")

// openError is ErrOpen with its cause.
type openError struct{ cause error }

func (e *openError) Error() string        { return ErrOpen.Error() + " after: " + e.cause.Error() }
func (e *openError) Is(target error) bool { return target == ErrOpen }
func (e *openError) Unwrap() error        { return e.cause }

// Err is the error of a call that b turns away: ErrOpen, wrapping the
// failure that last opened b.
func (b *Breaker) Err() error {
	if e := b.openErr.Load(); e != nil {
		return e
	}
	return ErrOpen
}

// New returns a closed breaker of node (its address, or "" for the whole
// counter) that opens after threshold failures in a row and probes every
// cooldown, on the clock elapsed. It writes its lines to log, and tells
// changed of each change of its state.
func New(threshold int, cooldown time.Duration, elapsed func() time.Duration,
	log func(slog.Level, string, ...slog.Attr), changed func(from, to State), node string) *Breaker {
	return &Breaker{threshold: int64(threshold), cooldown: cooldown, elapsed: elapsed, log: log, changed: changed, node: node}
}

// State is the state of a circuit breaker.
type State int32

const (
	// Closed: every request asks the store.
	Closed State = iota
	// Open: the store failed Options.BreakerFailures times in a row;
	// requests are decided without it until Options.BreakerCooldown
	// passes.
	Open
	// HalfOpen: the cool-down is over and one request, the probe, asks
	// the store. Its success closes the breaker, its failure opens it
	// again.
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	}
	return "half-open"
}

// sharedFailure is a failure of one round trip that several requests
// shared: the breaker counts it once.
type sharedFailure interface {
	error
	RoundTrip() uint64
}

// State is b's state now.
func (b *Breaker) State() State { return State(b.state.Load()) }

// Allow reports whether a request may call the counter, and whether it is
// the half-open probe, whose outcome decides the next state.
func (b *Breaker) Allow() (ok, probe bool) {
	switch b.State() {
	case Closed:
		return true, false
	case Open:
		if b.since(b.openedAt.Load()) < b.cooldown ||
			!b.state.CompareAndSwap(int32(Open), int32(HalfOpen)) {
			return false, false
		}
		b.changed(Open, HalfOpen)
		return true, true
	}
	return false, false // half-open: the probe is out
}

func (b *Breaker) since(t int64) time.Duration {
	return b.elapsed() - time.Duration(t)
}

// Success records a counter call that worked.
func (b *Breaker) Success(probe bool) {
	if probe {
		b.failures.Store(0)
		b.state.Store(int32(Closed))
		b.changed(HalfOpen, Closed)
		b.say(slog.LevelInfo, "ratelimit: circuit breaker closed",
			slog.Duration("open for", b.since(b.outageAt.Load())), slog.Int64("failed probes", b.failedProbes.Load()))
		return
	}
	if b.failures.Load() != 0 { // a load, not a store, on the hot path
		b.failures.Store(0)
	}
}

// Failure records a counter call that failed with err.
func (b *Breaker) Failure(probe bool, err error) {
	if probe {
		b.failedProbes.Add(1)
		b.open(HalfOpen, err)
		return
	}
	if t, ok := errors.AsType[sharedFailure](err); ok && b.lastTrip.Swap(t.RoundTrip()) == t.RoundTrip() {
		// The requests that shared one failed round trip are one failure:
		// another of them counted it.
		return
	}
	n := b.failures.Add(1)
	if n >= b.threshold && b.open(Closed, err) {
		b.outageAt.Store(b.openedAt.Load())
		b.failedProbes.Store(0)
		b.say(slog.LevelError, "ratelimit: circuit breaker open",
			slog.Int64("failures in a row", n), slog.Any("err", err), slog.Duration("probe every", b.cooldown))
	}
}

// Abandoned records that a call ended without the counter's answer or
// failure: its request's context ended first. That says nothing of the
// counter; a probe that ends so leaves the breaker open, for the next
// request to probe at once.
func (b *Breaker) Abandoned(probe bool) {
	if probe && b.state.CompareAndSwap(int32(HalfOpen), int32(Open)) {
		b.changed(HalfOpen, Open)
	}
}

// open opens the breaker from the state from, for the failure err, and
// reports whether this call did.
func (b *Breaker) open(from State, err error) bool {
	if b.State() != from {
		return false // another request opened it
	}
	b.openErr.Store(&openError{err})
	// The time is stored before the state, so that no request sees the new
	// state with an old time; two requests opening at once both store it.
	b.openedAt.Store(int64(b.elapsed()))
	if !b.state.CompareAndSwap(int32(from), int32(Open)) {
		return false
	}
	b.changed(from, Open)
	return true
}

// say writes a line about the breaker, naming its node.
func (b *Breaker) say(level slog.Level, msg string, attrs ...slog.Attr) {
	if b.node != "" {
		attrs = append(attrs, slog.String("node", b.node))
	}
	b.log(level, msg, attrs...)
}

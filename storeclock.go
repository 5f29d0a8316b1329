package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// A request must not wait long on a store that has stopped answering, yet a
// burst must not fail just because it queues: 600 requests at once on a
// pool of 64 connections wait several round trips for their turn, and on a
// small, loaded machine some of them wait longer than any per-call deadline
// short enough to be useful. So the clock that fails a call measures the
// store's silence, not the call: a call fails once StoreTimeout has passed
// since both its own start and the handler's last answer from the store.
// On a store that answers nothing, every call fails StoreTimeout after it
// starts; on a busy one, calls wait while answers keep coming, up to
// busyFactor × StoreTimeout. Before the store's first answer, connecting
// happens inside the calls, so they too get the busy allowance, until one
// fails.

const busyFactor = 10

// directFactor × StoreTimeout bounds a call made while the store is
// answering, through a client that enforces deadlines (see limiter.call).
const directFactor = 2

var (
	errStoreSilent = errors.New("ratelimit: counter did not answer within StoreTimeout")
	errStoreBusy   = errors.New("ratelimit: counter answered others but not this request within 10 × StoreTimeout")
)

// storeClock bounds a handler's calls to its store.
type storeClock struct {
	timeout time.Duration
	epoch   time.Time
	// lastAnswer is the time since epoch of the last answer: 0 before the
	// first answer, -1 once a call failed without any answer before it.
	lastAnswer atomic.Int64
}

func (s *storeClock) now() time.Duration { return time.Since(s.epoch) }

// answered records an answer from the store.
func (s *storeClock) answered() { s.lastAnswer.Store(int64(max(s.now(), 1))) }

// answering reports whether the store answered within the last timeout.
func (s *storeClock) answering() bool {
	last := s.lastAnswer.Load()
	return last > 0 && s.now()-time.Duration(last) < s.timeout
}

// watch returns a context for one call, cancelled with errStoreSilent or
// errStoreBusy, and the function that ends the watch when the call returns.
func (s *storeClock) watch(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &callWatch{store: s, cancel: cancel, start: s.now()}
	w.timer.Store(time.AfterFunc(s.timeout, w.fire))
	return ctx, func() {
		w.done.Store(true)
		w.timer.Load().Stop()
		cancel(nil)
	}
}

type callWatch struct {
	store  *storeClock
	cancel context.CancelCauseFunc
	start  time.Duration
	timer  atomic.Pointer[time.Timer]
	done   atomic.Bool
}

func (w *callWatch) fire() {
	if w.done.Load() {
		return
	}
	s := w.store
	now := s.now()
	if now-w.start >= busyFactor*s.timeout {
		w.cancel(errStoreBusy)
		return
	}
	last := time.Duration(s.lastAnswer.Load())
	if last == 0 {
		// Not one answer yet: connecting (dial, handshake, a cluster's
		// slot map) happens inside the first calls, which may take the
		// busy allowance, until one of them fails.
		last = now
	}
	heard := max(w.start, last)
	wait := min(s.timeout-(now-heard), busyFactor*s.timeout-(now-w.start))
	if wait <= 0 {
		w.cancel(errStoreSilent)
		return
	}
	w.timer.Store(time.AfterFunc(wait, w.fire))
}

// deadlineCounter is a counter that enforces a context's deadline on its
// own socket, so a call bounded by one needs no other watch, for up to
// directCalls calls at once. A RedisCounter over a client with
// ContextTimeoutEnabled is one.
type deadlineCounter interface {
	directCalls() int
}

// call counts key in the limiter's counter within the store's time budget.
func (l *limiter) call(ctx context.Context, key string) (int64, time.Duration, error) {
	inFlight := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	if inFlight <= l.directCalls && l.store.answering() {
		// The store is answering, its client enforces deadlines, and this
		// call will not queue for a connection: call it on this goroutine,
		// which a watch could not interrupt, with room for a busy moment.
		// Should the store fall silent, the calls already under way wait
		// out this deadline; those that start once it has been silent for
		// StoreTimeout are watched, and so are those of a burst, which
		// queue inside the client.
		ctx, cancel := context.WithTimeoutCause(ctx, directFactor*l.store.timeout, errStoreSilent)
		defer cancel()
		return l.called(ctx, key)
	}
	ctx, end := l.store.watch(ctx)
	defer end()
	return l.called(ctx, key)
}

// called makes the call and tells the store's clock how it went.
func (l *limiter) called(ctx context.Context, key string) (int64, time.Duration, error) {
	n, ttl, err := incrTTL(ctx, l.cfg.Counter, key, l.cfg.Window)
	if err == nil {
		l.store.answered()
		return n, ttl, nil
	}
	if cause := context.Cause(ctx); cause == errStoreSilent || cause == errStoreBusy {
		l.store.lastAnswer.CompareAndSwap(0, -1)
		err = fmt.Errorf("%w (%w)", cause, err)
	}
	return n, ttl, err
}

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

// watch returns a context for one call, cancelled with errStoreSilent or
// errStoreBusy, and the function that ends the watch when the call returns,
// reporting whether the store answered.
func (s *storeClock) watch(parent context.Context) (context.Context, func(answered bool)) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &callWatch{store: s, cancel: cancel, start: s.now()}
	w.timer.Store(time.AfterFunc(s.timeout, w.fire))
	return ctx, func(answered bool) {
		w.done.Store(true)
		w.timer.Load().Stop()
		cancel(nil)
		if answered {
			s.lastAnswer.Store(int64(max(s.now(), 1)))
		}
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
		s.lastAnswer.CompareAndSwap(0, -1)
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
		s.lastAnswer.CompareAndSwap(0, -1)
		w.cancel(errStoreSilent)
		return
	}
	w.timer.Store(time.AfterFunc(wait, w.fire))
}

// call counts key in the limiter's counter within the store's time budget.
func (l *limiter) call(ctx context.Context, key string) (int64, time.Duration, error) {
	ctx, end := l.store.watch(ctx)
	n, ttl, err := l.incr(ctx, key)
	end(err == nil)
	if err != nil {
		if cause := context.Cause(ctx); cause == errStoreSilent || cause == errStoreBusy {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
	}
	return n, ttl, err
}

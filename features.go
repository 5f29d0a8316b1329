package ratelimit

import (
	"fmt"

	"github.com/gatewaykit/ratelimit/store"
)

// What the limiter's options need of its stores (store.Features), and
// the errors that say which option a store cannot serve. NewLimiter
// checks the options once; a request that needs a feature at run time (a
// cost, a give-back, a reset, a wait) is refused before it reaches the
// store.

// optionNeed is what one option needs of a store: what names the option
// and ends with "need" or "needs", as in "Quotas need"; counterOnly when
// it needs it of Options.Counter alone.
type optionNeed struct {
	what        string
	need        store.Features
	counterOnly bool
}

// checkFeatures panics, naming the option, when Options.Counter or
// Options.Fallback lacks a feature that an option needs.
func (l *Limiter) checkFeatures() {
	var ns []optionNeed
	switch l.opts.Algorithm {
	case SlidingWindow:
		ns = append(ns, optionNeed{"Algorithm: sliding window needs", store.SlidingWindows, false})
	case TokenBucket:
		ns = append(ns, optionNeed{"Algorithm: token bucket needs", store.TokenBuckets, false})
	case InFlight:
		ns = append(ns, optionNeed{"Algorithm: in flight needs", store.Slots, false})
	}
	ns = append(ns, optionNeed{"Quotas need", l.quotas.needs(), false})
	if l.opts.Leases {
		// A lease claims a block of the budget as one cost, and gives
		// back what it did not spend.
		ns = append(ns, optionNeed{"Leases need", store.Costs | store.GiveBack, true})
	}
	for _, n := range ns {
		if err := l.lacks(n.what, n.need, n.counterOnly); err != nil {
			panic("ratelimit: " + err.Error())
		}
	}
}

// lacks returns why what cannot be done, or nil: Options.Counter, or,
// unless counterOnly, Options.Fallback, lacks a feature of need.
func (l *Limiter) lacks(what string, need store.Features, counterOnly bool) error {
	if missing := need &^ l.features; missing != 0 {
		return lackErr(what, "Counter", l.opts.Counter, missing)
	}
	if missing := need &^ l.fallbackFeatures; !counterOnly && l.fallback != nil && missing != 0 {
		return lackErr(what, "Fallback", l.opts.Fallback, missing)
	}
	return nil
}

// lackErr says that what needs the store of field, s, to decide missing,
// which it does not.
func lackErr(what, field string, s store.Store, missing store.Features) error {
	if c, ok := s.(counterStore); ok {
		return fmt.Errorf("%s %s to decide %v; CounterStore(%T) counts by Incr alone, in fixed windows at a cost of 1", what, field, missing, c.c)
	}
	return fmt.Errorf("%s %s to decide %v; %T does not declare it in store.Info.Features", what, field, missing, s)
}

// needs is what the quotas of s need of a store; 0 for none.
func (s *quotaSet) needs() (need store.Features) {
	if s == nil {
		return 0
	}
	for _, q := range s.quotas {
		if q.Calendar != 0 {
			need |= store.Calendars
		} else {
			need |= store.Quotas
		}
	}
	return need
}

// waitErr is why a request of the limiter cannot wait for its turn
// (Limiter.Wait, a middleware's MaxDelay), or nil.
func (l *Limiter) waitErr() error {
	if l.opts.Algorithm != TokenBucket {
		return fmt.Errorf("only a TokenBucket limiter can have a request wait for its turn, not a %v one", l.opts.Algorithm)
	}
	return l.lacks("a wait for a turn needs", store.Reservations, false)
}

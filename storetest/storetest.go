// Package storetest is the contract of a ratelimit.Store, as tests that
// any store runs: MemoryCounter and RedisCounter run it, and a store of
// your own proves itself by passing it.
//
//	func TestMyStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) ratelimit.Store { return newMyStore(t) })
//	}
//
// A store declares its features (store.Features) in what Attach returns.
// Run runs the cases of the features the store declares. Each case needs
// some features, or none. A case that needs a feature the store does not
// declare is skipped, and its message names what the store lacks. The
// cases that need none test fixed windows at a cost of 1, which every
// store decides.
//
// The cases step through time with the Requests' Now. A store that counts
// on Request.Now (one in the process, as MemoryCounter) is stepped on a
// fake clock, instantly; one that counts on a clock of its own (one that
// replicas share, as RedisCounter) is stepped by sleeping, in windows of a
// few hundred milliseconds, and the cases that would need to wait for a
// calendar day to end check instead that the periods it reports are the
// right ones. Run tells the two apart by asking. A case on a store's own
// clock that fails after its steps ran late (a busy machine oversleeps)
// is run again on new tenants; one that fails on time is reported at
// once.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
)

// Run runs the contract of a Store as subtests of t, each on a store that
// newStore makes. newStore may return the same store each time: every case
// counts under tenants of its own.
//
// Run asks a store from newStore for its features, by Attach, once. It
// runs each case whose features the store declares. It skips each other
// case, with a message that names the features the store lacks.
func Run(t *testing.T, newStore func(t *testing.T) ratelimit.Store) {
	t.Helper()
	first := newStore(t)
	own, has := ownClock(t, first), declared(t, first)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if missing := c.needs &^ has; missing != 0 {
				t.Skipf("needs %v, which the store does not declare", missing)
			}
			st := newStore(t)
			if !own {
				c.run(&subject{t: t, store: st, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
				return
			}
			// Stepped by sleeping: an attempt that ran late is made again
			// (see attempt.go).
			runAttempts(t, func(a *attempt) {
				s := &subject{t: a, store: st, own: true, start: time.Now()}
				s.now = s.start // within a window of the store's bound on how old a time may be
				a.late = s.late
				c.run(s)
			})
		})
	}
}

// declared returns the features s declares: what its Attach returns for
// a limiter of its own. The limiter's budget is the attach case's, so
// that a store newStore returns again accepts both.
func declared(t *testing.T, s ratelimit.Store) store.Features {
	t.Helper()
	r := ratelimit.Request{Name: "storetest-" + tenant(t, "features"), Algorithm: ratelimit.FixedWindow,
		Cost: 1, Limit: 10, Window: time.Minute, Now: time.Now()}
	info, err := s.Attach(r)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return info.Features
}

// ownClock reports whether s counts on a clock of its own rather than on
// Request.Now: two requests two hours apart by Now, in a window of an
// hour, count in one window only on a clock of the store's own.
func ownClock(t *testing.T, s ratelimit.Store) bool {
	t.Helper()
	r := ratelimit.Request{Tenant: tenant(t, "clock"), Cost: 1, Name: "default", Limit: 10, Window: time.Hour, Now: time.Now()}
	if _, err := s.Take(context.Background(), r); err != nil {
		t.Fatalf("Take: %v", err)
	}
	r.Now = r.Now.Add(2 * time.Hour)
	a, err := s.Take(context.Background(), r)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return a.Counts[0].N == 2
}

// A testCase is one clause of the contract, and the features a store
// must declare for it to run.
type testCase struct {
	name  string
	needs store.Features
	run   func(s *subject)
}

// subject is a store under one case, with the case's clock.
type subject struct {
	t     tb
	store ratelimit.Store
	own   bool      // the store counts on a clock of its own: sleep to step
	now   time.Time // the Requests' Now, for a store that counts on it

	// For a store on a clock of its own: when the case started, and how
	// long it has asked to sleep since.
	start time.Time
	slept time.Duration
}

// at returns the time of the subject's clock now.
func (s *subject) at() time.Time {
	if s.own {
		return time.Now()
	}
	return s.now
}

// advance steps the subject's clock by d.
func (s *subject) advance(d time.Duration) {
	if s.own {
		time.Sleep(d)
		s.slept += d
		return
	}
	s.now = s.now.Add(d)
}

// late is how much longer the case has taken, on a store on a clock of
// its own, than the sleeps it asked for: the lateness its steps carry.
func (s *subject) late() time.Duration { return time.Since(s.start) - s.slept }

// req returns a request of tenant, at the subject's clock's now.
func (s *subject) req(tenant string, algo ratelimit.Algorithm, cost, limit int64, window time.Duration, quotas ...ratelimit.Quota) ratelimit.Request {
	r := ratelimit.Request{Tenant: tenant, Algorithm: algo, Cost: cost, Name: "default", Limit: limit, Window: window, Now: s.at()}
	if len(quotas) > 0 {
		r.Quotas = quotas
	}
	return r
}

// take has the store Take r, failing the case on an error.
func (s *subject) take(r ratelimit.Request) ratelimit.Answer {
	s.t.Helper()
	r.Now = s.at()
	a, err := s.store.Take(context.Background(), r)
	if err != nil {
		s.t.Fatalf("Take(%s, cost %d): %v", r.Key(), r.Cost, err)
	}
	return a
}

// read has the store Take r at cost 0.
func (s *subject) read(r ratelimit.Request) ratelimit.Answer {
	s.t.Helper()
	r.Cost = 0
	return s.take(r)
}

// give has the store Give back r, with the marks of took.
func (s *subject) give(r ratelimit.Request, took ratelimit.Answer) {
	s.t.Helper()
	r.Now = s.at()
	var marks store.Marks
	for j, c := range took.Counts {
		marks[j] = c.Mark
	}
	if err := s.store.Give(context.Background(), r, marks); err != nil {
		s.t.Fatalf("Give(%s, cost %d): %v", r.Key(), r.Cost, err)
	}
}

// expect checks that a is what the store must answer: allowed or not, and
// each limit's count.
func (s *subject) expect(what string, a ratelimit.Answer, allowed bool, counts ...int64) {
	s.t.Helper()
	if a.Allowed != allowed {
		s.t.Errorf("%s: Allowed = %v, want %v (%+v)", what, a.Allowed, allowed, a.Counts[:len(counts)])
	}
	for j, n := range counts {
		if a.Counts[j].N != n {
			s.t.Errorf("%s: limit %d counts %d, want %d (%+v)", what, j, a.Counts[j].N, n, a.Counts[:len(counts)])
		}
	}
}

var tenantSeq atomic.Int64

// tenant returns a tenant ID no other case uses, so that cases can share
// one store (a Redis server) without seeing each other's counts.
func tenant(t tb, what string) string {
	return fmt.Sprintf("storetest:%s:%s:%d:%d", t.Name(), what, time.Now().UnixNano(), tenantSeq.Add(1))
}

// burst has n goroutines Take r at once, and returns how many were
// allowed.
func (s *subject) burst(r ratelimit.Request, n int) int {
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r := r
			r.Now = s.at()
			a, err := s.store.Take(context.Background(), r)
			if err != nil {
				s.t.Errorf("Take: %v", err)
				return
			}
			if a.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(allowed.Load())
}

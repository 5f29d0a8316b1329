// Package storetest is the contract of a store.Store, as tests that any
// store runs: MemoryCounter and RedisCounter run it, and a store of your
// own proves itself by passing it.
//
//	func TestMyStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return newMyStore(t) })
//	}
//
// A store declares its features (store.Features) in what Attach returns.
// Run runs the cases of the features the store declares. Each case needs
// some features, or none. A case that needs a feature the store does not
// declare is skipped, and its message names what the store lacks. The
// cases that need none test fixed windows at a cost of 1, which every
// store decides.
//
// Each request of a case comes with a Budget of its own, under the Prefix
// "storetest:", and a Key of the Prefix and a tenant that no other case
// uses. Its Key is a copy that Run writes over once the call returns, so
// a store that keeps a Key it did not copy loses its counts.
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

	"github.com/gatewaykit/ratelimit/store"
)

// prefix is the Prefix of the Budget of every request of a case.
const prefix = "storetest:"

// Run runs the contract of a Store as subtests of t, each on a store that
// newStore makes. newStore may return the same store each time: every case
// counts under tenants of its own.
//
// Run attaches each store from newStore as a limiter with plans (its
// cases come with Budgets of their own), and asks the first for its
// features. It runs each case whose features the store declares. It skips
// each other case, with a message that names the features the store
// lacks.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	first := newStore(t)
	has := declared(t, first) // Attach comes before the first request
	own := ownClock(t, first)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if missing := c.needs &^ has; missing != 0 {
				t.Skipf("needs %v, which the store does not declare", missing)
			}
			st := newStore(t)
			declared(t, st) // attached before its first request
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

// limiterBudget is the Budget of a limiter that attaches to a store: a
// fixed window of 10 a minute, under a Prefix of its own. The declared
// helper's and the attach case's are alike, so that a store newStore
// returns again accepts both.
func limiterBudget(t tb, what string) *store.Budget {
	return &store.Budget{Prefix: prefix + tenant(t, what) + ":", Name: "default",
		Algorithm: store.FixedWindow, Limit: 10, Window: time.Minute}
}

// declared attaches s as a limiter with plans of its own, and returns the
// features s declares: what its Attach returns.
func declared(t *testing.T, s store.Store) store.Features {
	t.Helper()
	info, err := s.Attach(limiterBudget(t, "features"), true)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return info.Features
}

// ownClock reports whether s counts on a clock of its own rather than on
// Request.Now: two requests two hours apart by Now, in a window of an
// hour, count in one window only on a clock of the store's own.
func ownClock(t *testing.T, s store.Store) bool {
	t.Helper()
	r := newRequest(tenant(t, "clock"), store.FixedWindow, 1, 10, time.Hour)
	r.Now = time.Now()
	res := newResult(&r)
	if err := call(r, func(r *store.Request) error { return s.Take(context.Background(), r, res) }); err != nil {
		t.Fatalf("Take: %v", err)
	}
	r.Now = r.Now.Add(2 * time.Hour)
	res = newResult(&r)
	if err := call(r, func(r *store.Request) error { return s.Take(context.Background(), r, res) }); err != nil {
		t.Fatalf("Take: %v", err)
	}
	return res.Counts[0].N == 2
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
	store store.Store
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

// newRequest returns a request of tenant against a Budget of its own. A
// case may set the Budget's fields before the request's first call, and
// never after: a store may know a Budget by its pointer.
func newRequest(tenant string, algo store.Algorithm, cost, limit int64, window time.Duration, quotas ...store.Quota) store.Request {
	b := &store.Budget{Prefix: prefix, Name: "default", Algorithm: algo, Limit: limit, Window: window}
	if len(quotas) > 0 {
		b.Quotas = quotas
	}
	return store.Request{Budget: b, Key: []byte(prefix + tenant), Tenant: tenant, Cost: cost}
}

// req returns a request of tenant, at the subject's clock's now, against
// a Budget of its own (see newRequest).
func (s *subject) req(tenant string, algo store.Algorithm, cost, limit int64, window time.Duration, quotas ...store.Quota) store.Request {
	r := newRequest(tenant, algo, cost, limit, window, quotas...)
	r.Now = s.at()
	return r
}

// newResult returns a Result with a Count for each limit of r.
func newResult(r *store.Request) *store.Result {
	return &store.Result{Counts: make([]store.Count, 1+len(r.Quotas))}
}

// call calls f with r, whose Key is a copy that it writes over once f
// returns: the Key is valid only during the call, and a store copies what
// it keeps.
func call(r store.Request, f func(r *store.Request) error) error {
	r.Key = append([]byte(nil), r.Key...)
	err := f(&r)
	for i := range r.Key {
		r.Key[i] = '?'
	}
	return err
}

// take has the store Take r, failing the case on an error.
func (s *subject) take(r store.Request) *store.Result {
	s.t.Helper()
	r.Now = s.at()
	res := newResult(&r)
	if err := call(r, func(r *store.Request) error { return s.store.Take(context.Background(), r, res) }); err != nil {
		s.t.Fatalf("Take(%s, cost %d): %v", r.Key, r.Cost, err)
	}
	return res
}

// read has the store Take r at cost 0.
func (s *subject) read(r store.Request) *store.Result {
	s.t.Helper()
	r.Cost = 0
	return s.take(r)
}

// marks returns the marks of the windows that took counted in.
func marks(took *store.Result) store.Marks {
	var m store.Marks
	for j, c := range took.Counts {
		m[j] = c.Mark
	}
	return m
}

// give has the store Give back r, with the marks of took.
func (s *subject) give(r store.Request, took *store.Result) {
	s.t.Helper()
	s.giveIn(r, marks(took))
}

// giveIn has the store Give back r in the windows that m names.
func (s *subject) giveIn(r store.Request, m store.Marks) {
	s.t.Helper()
	r.Now = s.at()
	if err := call(r, func(r *store.Request) error { return s.store.Give(context.Background(), r, m) }); err != nil {
		s.t.Fatalf("Give(%s, cost %d): %v", r.Key, r.Cost, err)
	}
}

// reset has the store Reset r's tenant.
func (s *subject) reset(r store.Request) {
	s.t.Helper()
	r.Now = s.at()
	if err := call(r, func(r *store.Request) error { return s.store.Reset(context.Background(), r) }); err != nil {
		s.t.Fatalf("Reset(%s): %v", r.Key, err)
	}
}

// expect checks that a is what the store must answer: allowed or not, and
// each limit's count.
func (s *subject) expect(what string, a *store.Result, allowed bool, counts ...int64) {
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
	return fmt.Sprintf("%s:%s:%d:%d", t.Name(), what, time.Now().UnixNano(), tenantSeq.Add(1))
}

// burst has n goroutines Take r at once, and returns how many were
// allowed.
func (s *subject) burst(r store.Request, n int) int {
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r := r
			r.Now = s.at()
			res := newResult(&r)
			if err := call(r, func(r *store.Request) error { return s.store.Take(context.Background(), r, res) }); err != nil {
				s.t.Errorf("Take: %v", err)
				return
			}
			if res.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(allowed.Load())
}

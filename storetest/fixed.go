package storetest

import (
	"fmt"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The clauses that need no feature: fixed windows at a cost of 1, which
// every store decides. They read counts from the answers of Take alone,
// so that a store that declares nothing is tested for something real.

// windowRuns checks that c reports a window of width that runs: some of
// it left, no more than its length.
func (s *subject) windowRuns(what string, c store.Count, width time.Duration) {
	s.t.Helper()
	if c.Left <= 0 || c.Left > c.Length || c.Length < width {
		s.t.Errorf("%s: a fixed window of %v reports Left %v of Length %v", what, width, c.Left, c.Length)
	}
}

func fixedExact(s *subject) {
	r := s.req(tenant(s.t, "exact"), store.FixedWindow, 1, 3, w)
	for n := int64(1); n <= 3; n++ {
		what := fmt.Sprintf("request %d at a limit of 3", n)
		a := s.take(r)
		s.expect(what, a, true, n)
		if !a.Counts[0].Fits {
			s.t.Errorf("%s: Fits = false", what)
		}
		s.windowRuns(what, a.Counts[0], w)
	}
	for range 2 {
		a := s.take(r)
		s.expect("past the limit", a, false, 3)
		if a.Counts[0].Fits {
			s.t.Errorf("past the limit: Fits = true")
		}
		s.windowRuns("past the limit", a.Counts[0], w)
	}
	s.advance(w + 50*time.Millisecond)
	s.expect("after the window", s.take(r), true, 1)
}

func fixedWindowEnds(s *subject) {
	r := s.req(tenant(s.t, "ends"), store.FixedWindow, 1, 2, w)
	s.expect("the first request", s.take(r), true, 1)
	s.advance(w / 3)
	s.expect("a third in: the window runs from the first request", s.take(r), true, 2)
	s.expect("the limit spent", s.take(r), false, 2)
	s.advance(w - w/3 + 50*time.Millisecond)
	s.expect("after the window", s.take(r), true, 1)
}

func tenantsApart(s *subject) {
	a := s.req(tenant(s.t, "apart-a"), store.FixedWindow, 1, 2, time.Minute)
	b := a // the same Budget, another tenant
	b.Tenant = tenant(s.t, "apart-b")
	b.Key = []byte(prefix + b.Tenant)
	s.expect("a's first", s.take(a), true, 1)
	s.expect("a's second", s.take(a), true, 2)
	s.expect("a past its limit", s.take(a), false, 2)
	s.expect("b's first, after a's", s.take(b), true, 1)
	s.expect("a, after b's first", s.take(a), false, 2)
}

// exactly checks that n callers at once Take r, and the limit gets
// through, no more.
func (s *subject) exactly(what string, r store.Request, n, limit int) {
	s.t.Helper()
	if got := s.burst(r, n); got != limit {
		s.t.Errorf("%s: %d requests at once at a limit of %d: %d allowed", what, n, limit, got)
	}
}

func concurrentExact(s *subject) {
	s.exactly("a fixed window", s.req(tenant(s.t, "burst"), store.FixedWindow, 1, 50, time.Minute), 200, 50)
}

func attach(s *subject) {
	if _, err := s.store.Attach(limiterBudget(s.t, "attach"), false); err != nil {
		s.t.Errorf("Attach: %v", err)
	}
}

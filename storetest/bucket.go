package storetest

import (
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The token bucket's clauses. A store reports a bucket (Algorithm
// TokenBucket: Limit per Window, at most Burst at once) by its Count: N
// the units spent (Burst less the whole units it holds), Left the time
// until it is full again, Length the time it takes to fill from empty
// (Burst × Window/Limit).

// bucketReq is a request of tenant in a bucket of 10 a second, burst 5,
// beside quotas.
func (s *subject) bucketReq(tenant string, cost int64, quotas ...store.Quota) store.Request {
	r := s.req(tenant, store.TokenBucket, cost, 10, time.Second, quotas...)
	r.Burst = 5 // the Budget's own, before its first request
	return r
}

// near reports whether d is within slack of want.
func near(d, want, slack time.Duration) bool { return d >= want-slack && d <= want+slack }

func bucketBurstAndRate(s *subject) {
	r := s.bucketReq(tenant(s.t, "bucket"), 1)
	if n := s.burst(r, 20); n != 5 {
		s.t.Fatalf("20 requests at once in a bucket of 5: %d allowed, want 5", n)
	}
	a := s.read(r)
	s.expect("after the burst", a, true, 5)
	if c := a.Counts[0]; c.Length != 500*time.Millisecond || !near(c.Left, 500*time.Millisecond, 100*time.Millisecond) {
		s.t.Errorf("after the burst: Left %v, Length %v; want about 500ms, 500ms", c.Left, c.Length)
	}
	s.expect("a refusal", s.take(r), false, 5)
	s.advance(210 * time.Millisecond) // two units come back
	r.Cost = 2
	s.expect("two units 210ms later", s.take(r), true, 5)
	r.Cost = 1
	s.expect("none left", s.take(r), false, 5)
}

func bucketGiveAndCharge(s *subject) {
	r := s.bucketReq(tenant(s.t, "bucket-give"), 4)
	took := s.take(r)
	s.expect("4 of 5", took, true, 4)
	r.Cost = 3
	s.give(r, took)
	s.expect("3 given back", s.read(r), true, 1)
	r.Cost = 10
	s.give(r, took)
	s.expect("more given back than spent: full, no more", s.read(r), true, 0)
	r.Cost = -25 // a charge of 25 units: 2.5 s past full
	s.give(r, took)
	a := s.read(r)
	s.expect("25 charged past the burst", a, true, 25)
	if c := a.Counts[0]; !near(c.Left, 2500*time.Millisecond, 100*time.Millisecond) {
		s.t.Errorf("after the charge: Left %v; want about 2.5s", c.Left)
	}
	r.Cost = 1
	s.expect("a request after the debt", s.take(r), false, 25)
	s.reset(r)
	s.expect("after a reset", s.read(r), true, 0)
	r.Cost = -10 // a bucket the store no longer holds is full, and a charge puts it in debt
	s.give(r, took)
	s.expect("10 charged in a bucket reset", s.read(r), true, 10)
}

func bucketDelay(s *subject) {
	r := s.bucketReq(tenant(s.t, "bucket-delay"), 5)
	s.expect("the burst", s.take(r), true, 5)
	r.Cost, r.Delay = 1, 50*time.Millisecond
	s.expect("a turn 100ms away, 50ms to wait", s.take(r), false, 5)
	r.Delay = 300 * time.Millisecond
	a := s.take(r)
	s.expect("a turn 100ms away, 300ms to wait", a, true, 6)
	if c := a.Counts[0]; !near(c.Left-c.Length, 100*time.Millisecond, 50*time.Millisecond) {
		s.t.Errorf("the reserved turn: Left %v of Length %v; want Left - Length, the wait, about 100ms", c.Left, c.Length)
	}
	a = s.take(r)
	s.expect("the next caller queues behind it", a, true, 7)
	if c := a.Counts[0]; !near(c.Left-c.Length, 200*time.Millisecond, 50*time.Millisecond) {
		s.t.Errorf("the next turn: Left %v of Length %v; want the wait about 200ms", c.Left, c.Length)
	}
}

func bucketNoWindow(s *subject) {
	r := s.bucketReq(tenant(s.t, "bucket-no-window"), 1)
	plain := s.take(r)
	s.expect("1 of 5", plain, true, 1)
	noWindow := marks(plain)
	noWindow[0] = store.NoWindow
	r.Cost = -2
	s.giveIn(r, noWindow)
	s.expect("a charge with a mark that names no window", s.read(r), true, 1)

	r = s.bucketReq(tenant(s.t, "bucket-no-window-quota"), 1, store.Quota{Name: "hour", Limit: 100, Window: time.Hour})
	took := s.take(r)
	s.expect("1 of 5, 1 of 100", took, true, 1, 1)
	quotaOnly, bucketOnly := marks(took), marks(took)
	quotaOnly[0], bucketOnly[1] = store.NoWindow, store.NoWindow
	r.Cost = -3
	s.giveIn(r, quotaOnly)
	s.expect("3 charged in the quota alone", s.read(r), true, 1, 4)
	r.Cost = -2
	s.giveIn(r, bucketOnly)
	s.expect("2 charged in the bucket alone", s.read(r), true, 3, 4)
}

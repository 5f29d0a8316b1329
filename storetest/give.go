package storetest

import (
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The clauses of giving back, charging and resetting: a store that
// declares store.GiveBack gives back and charges in the windows a request
// was counted in, and one that declares store.Resets clears a tenant's
// limits.

func giveBackSameWindow(s *subject) {
	r := s.req(tenant(s.t, "give"), store.FixedWindow, 3, 10, w)
	took := s.take(r)
	s.give(r, took)
	s.expect("after giving 3 back", s.read(r), true, 0)
	took = s.take(r)
	s.expect("3 more", took, true, 3)
	s.advance(w + 50*time.Millisecond)
	s.expect("in the next window", s.take(r), true, 3)
	s.give(r, took)
	s.expect("a give-back of the window before", s.read(r), true, 3)

	sl := s.req(tenant(s.t, "give-sliding"), store.SlidingWindow, 2, 10, time.Minute)
	took = s.take(sl)
	s.give(sl, took)
	s.expect("a sliding window after giving 2 back", s.read(sl), true, 0)
}

// giveBackAfterRead: a read's marks name the windows that run, so that a
// give-back without the Take that counted (Limiter.GiveBack) finds them,
// in every limit; and a window that starts after the read is left alone.
func giveBackAfterRead(s *subject) {
	quotas := []store.Quota{{Name: "q", Limit: 50, Window: time.Minute}, {Name: "day", Limit: 100, Calendar: store.Day}}
	r := s.req(tenant(s.t, "give-read"), store.FixedWindow, 5, 10, time.Minute, quotas...)
	s.take(r)
	read := s.read(r)
	r.Cost = 3
	s.give(r, read)
	s.expect("3 given back by a read's marks", s.read(r), true, 2, 2, 2)

	sl := s.req(tenant(s.t, "give-read-sliding"), store.SlidingWindow, 4, 10, time.Minute)
	s.take(sl)
	read = s.read(sl)
	sl.Cost = 4
	s.give(sl, read)
	s.expect("a sliding window given 4 back by a read's marks", s.read(sl), true, 0)

	f := s.req(tenant(s.t, "give-read-ended"), store.FixedWindow, 3, 10, w)
	s.take(f)
	read = s.read(f)
	s.advance(w + 50*time.Millisecond)
	s.take(f)
	s.give(f, read)
	s.expect("a give-back by the marks of a read of the window before", s.read(f), true, 3)
}

func giveBackQuotas(s *subject) {
	quotas := []store.Quota{{Name: "q", Limit: 50, Window: time.Minute}, {Name: "day", Limit: 100, Calendar: store.Day}}
	r := s.req(tenant(s.t, "give-quotas"), store.FixedWindow, 4, 10, time.Minute, quotas...)
	s.take(r)
	r.Cost = 3
	took := s.take(r)
	s.expect("7 taken", took, true, 7, 7, 7)
	s.give(r, took)
	s.expect("3 given back", s.read(r), true, 4, 4, 4)
}

// giveNegativeCharges: Give with a negative Cost charges -Cost
// (Limiter.Settle at a higher cost), past the limit, in every limit whose
// window is still the one it was counted in, and never in a window that
// has ended: that one is not made again.
func giveNegativeCharges(s *subject) {
	r := s.req(tenant(s.t, "charge"), store.FixedWindow, 2, 10, w)
	took := s.take(r)
	r.Cost = -48
	s.give(r, took)
	s.expect("2 counted, 48 charged", s.read(r), true, 50)
	r.Cost = 1
	s.expect("a request after the debt", s.take(r), false, 50)
	s.advance(w + 50*time.Millisecond)
	r.Cost = -20
	s.give(r, took)
	s.expect("a charge after its window ended", s.read(r), true, 0)
	r.Cost = 1
	s.expect("the next window's first request", s.take(r), true, 1)

	sl := s.req(tenant(s.t, "charge-sliding"), store.SlidingWindow, 2, 10, time.Minute)
	took = s.take(sl)
	sl.Cost = -8
	s.give(sl, took)
	s.expect("a sliding window charged 8", s.read(sl), true, 10)
	sl.Cost = 1
	s.expect("a sliding window after the charge", s.take(sl), false, 10)

	quotas := []store.Quota{{Name: "q", Limit: 50, Window: time.Minute}, {Name: "day", Limit: 100, Calendar: store.Day}}
	q := s.req(tenant(s.t, "charge-quotas"), store.FixedWindow, 1, 10, time.Minute, quotas...)
	took = s.take(q)
	q.Cost = -59
	s.give(q, took)
	s.expect("every limit charged 59", s.read(q), true, 60, 60, 60)
	q.Cost = 1
	s.expect("a request after the debt", s.take(q), false, 60, 60, 60)
}

func giveBackFloor(s *subject) {
	r := s.req(tenant(s.t, "give-floor"), store.FixedWindow, 2, 10, time.Minute)
	took := s.take(r)
	r.Cost = 5
	s.give(r, took)
	s.expect("5 given back of 2 counted", s.read(r), true, 0)
	r.Cost = 10
	s.expect("the whole budget, and no more", s.take(r), true, 10)
	r.Cost = 1
	s.expect("one more", s.take(r), false, 10)
}

// resetClears checks that a Reset gives r's tenant its whole budget
// again, in every limit of r: each limit of r allows 2 at a cost of 1,
// and two are taken before the reset, and two after.
func (s *subject) resetClears(r store.Request) {
	s.t.Helper()
	ones := make([]int64, 1+len(r.Quotas))
	twos := make([]int64, len(ones))
	for j := range ones {
		ones[j], twos[j] = 1, 2
	}
	take := func(what string, allowed bool, counts []int64) {
		s.t.Helper()
		r.Slot++ // an InFlight request's own slot
		s.expect(r.Algorithm.String()+": "+what, s.take(r), allowed, counts...)
	}
	take("the first request", true, ones)
	take("the second", true, twos)
	take("past the limit", false, twos)
	s.reset(r)
	take("the first request after Reset", true, ones)
	take("the second after Reset", true, twos)
}

func resetFixed(s *subject) {
	s.resetClears(s.req(tenant(s.t, "reset"), store.FixedWindow, 1, 2, time.Minute))
}

func resetSliding(s *subject) {
	s.resetClears(s.req(tenant(s.t, "reset-sliding"), store.SlidingWindow, 1, 2, time.Minute))
}

func resetQuotas(s *subject) {
	quotas := []store.Quota{{Name: "q", Limit: 2, Window: time.Minute}, {Name: "month", Limit: 2, Calendar: store.Month}}
	s.resetClears(s.req(tenant(s.t, "reset-quotas"), store.FixedWindow, 1, 10, time.Minute, quotas...))
}

func resetSlots(s *subject) {
	s.resetClears(s.req(tenant(s.t, "reset-slots"), store.InFlight, 1, 2, time.Minute))
}

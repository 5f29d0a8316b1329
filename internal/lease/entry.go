package lease

import (
	"math"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// Entry is a hot key's lease on this replica: its block, the claim in
// flight, the key's rate here and what the store last said of its
// limits. R is what the caller keeps of the last claim, to give back
// with.
type Entry[R any] struct {
	mu       sync.Mutex
	t        *Table[R]
	key      string // the key, as the table holds it
	b        block
	claiming chan struct{} // closed when the claim in flight ends; nil: none
	giving   chan struct{} // closed when the give-back of an idle block ends; nil: none
	gives    uint64        // how many give-backs of idle blocks have ended
	rate     rate          // the key's rate here, and its last request

	// What the store last reported of the key's limits, and when.
	known   [window.MaxLimits]store.Count
	knownAt int64
	knowing bool

	req     R
	checked uint64      // b.spends when Idle last looked
	timer   *time.Timer // runs the caller's Idle check
	armed   bool        // timer is due
}

// A Step is what to do next with a request of a hot key (see Entry.Next):
// it was decided from the block (Spent, Counts holding its limits as this
// replica sees them), or it waits for the claim in flight and asks again
// (Wait), or it claims Claim units, its own cost included, then calls
// Claimed; or, none of those, the store decides it and Learn hears the
// answer. Gives, for a request the store is to decide, is how many
// give-backs of idle blocks had ended when it was sent (see Refused).
type Step struct {
	Spent  bool
	Counts [window.MaxLimits]store.Count
	Wait   <-chan struct{}
	Claim  int64
	Gives  uint64
}

// Key is the key e is the entry of.
func (e *Entry[R]) Key() string { return e.key }

// Spend decides a request of cost at now from the block, if it holds
// the cost; ls are the request's limits. held is what the block holds
// when that is less than cost.
func (e *Entry[R]) Spend(now, cost int64, ls []window.Limit) (st Step, spent bool, held int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.b.take(now, cost) {
		return Step{}, false, e.b.left(now)
	}
	e.rate.add(now, cost)
	return Step{Spent: true, Counts: e.b.seen(now, ls)}, true, 0
}

// Next is the next step of a request of cost at now, whose limits are
// ls; first says that it has not asked before. A request waits for every
// claim in flight: each ends in a block, whose units it may then spend,
// or in the store's refusal, which makes the next claim smaller.
func (e *Entry[R]) Next(now, cost int64, ls []window.Limit, first bool) Step {
	e.mu.Lock()
	defer e.mu.Unlock()
	if first {
		e.rate.add(now, cost)
	}
	if e.b.take(now, cost) {
		return Step{Spent: true, Counts: e.b.seen(now, ls)}
	}
	if e.claiming != nil {
		return Step{Wait: e.claiming}
	}
	size := e.size(now, ls)
	if size <= cost {
		// Near the limit, or not hot enough: one by one, as a cold key.
		return Step{Gives: e.gives}
	}
	e.claiming = make(chan struct{})
	return Step{Claim: size, Gives: e.gives}
}

// Gives is how many give-backs of idle blocks have ended, for Refused.
func (e *Entry[R]) Gives() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gives
}

// Refused decides from the block a request of cost at now that the store
// refused (ls its limits), when a claim made while the request was on its
// way left units in it. The store counted nothing of a refused request,
// so spending from the block is exact, and a unit this replica holds is
// not left to expire beside a refusal. It waits, until done is closed,
// for a claim in flight, then spends from its block. Failing that, again
// says to ask the store once more when an idle block's units went back
// to it after gives, the give-backs ended when the request was sent (they
// may have reached it after the refusal), or once a give-back in flight
// ends. None of those: the refusal stands.
func (e *Entry[R]) Refused(now, cost int64, ls []window.Limit, gives uint64, done <-chan struct{}) (st Step, again bool) {
	e.mu.Lock()
	st, claiming := e.spend(now, cost, ls), e.claiming
	e.mu.Unlock()
	if claiming != nil && !st.Spent {
		select {
		case <-claiming:
		case <-done:
			return Step{}, false
		}
		e.mu.Lock()
		st = e.spend(now, cost, ls)
		e.mu.Unlock()
	}
	if st.Spent {
		return st, false
	}
	e.mu.Lock()
	giving, given := e.giving, e.gives != gives
	e.mu.Unlock()
	switch {
	case given:
		return Step{}, true
	case giving == nil:
		return Step{}, false
	}
	select {
	case <-giving:
		return Step{}, true
	case <-done:
		return Step{}, false
	}
}

// spend decides a request of cost at now from the block, if it holds the
// cost; e.mu is held.
func (e *Entry[R]) spend(now, cost int64, ls []window.Limit) Step {
	if !e.b.take(now, cost) {
		return Step{}
	}
	return Step{Spent: true, Counts: e.b.seen(now, ls)}
}

// size is how many units to claim at now: what the key spends here in a
// Horizon (or a sixteenth of its shortest window), at most a quarter of
// what the store last said was left of each limit.
func (e *Entry[R]) size(now int64, ls []window.Limit) int64 {
	span := Horizon
	left := int64(math.MaxInt64)
	for i := range ls {
		l := &ls[i]
		if l.Window > 0 {
			span = min(span, l.Window/16)
		}
		most := l.Limit
		if l.Kind == store.TokenBucket && l.Calendar == 0 {
			most = l.Burst
		}
		if e.knowing {
			if st, ok := l.Aged(e.known[i], timeOf(now-e.knownAt)); ok {
				most = l.Figures(&st, 0).Remaining
			}
		}
		left = min(left, most)
	}
	want := int64(math.Ceil(e.rate.perNs * float64(span)))
	return min(want, left/4)
}

// Claimed ends the claim that Next asked for, of size units for a request
// of cost at now, res being the store's answer (nil: it failed), req what
// to keep of it, slack how much earlier than the store says its windows
// end the block stops being spent (a store that rounds). For a claim the
// store allowed, the block is made and the request decided from it.
func (e *Entry[R]) Claimed(now, size, cost int64, ls []window.Limit, res *store.Result, slack time.Duration, req R) Step {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.claiming)
	e.claiming = nil
	if res == nil {
		return Step{}
	}
	e.learn(now, res, len(ls))
	if !res.Allowed {
		return Step{}
	}
	old := &e.b
	carry := int64(0)
	if old.live(now) && !old.bucket && sameMarks(old, res) {
		// The same windows: what is left of it is the new one's.
		carry = old.size - old.spent
	}
	e.ended(now, carry)
	b := block{id: e.t.ids.Add(1), size: size + carry, at: now, until: math.MaxInt64, n: len(ls)}
	for i := range ls {
		b.counts[i] = res.Counts[i]
		if i > 0 || ls[0].Kind != store.TokenBucket {
			b.until = min(b.until, now+int64(res.Counts[i].Left-slack))
		}
	}
	if ls[0].Kind == store.TokenBucket {
		b.bucket = true
		b.iv = float64(ls[0].Window) / float64(ls[0].Limit)
		b.t0 = max(float64(now)+float64(res.Counts[0].Left)-float64(size)*b.iv, float64(now))
	}
	e.b, e.req, e.checked = b, req, 0
	if !e.b.take(now, cost) {
		return Step{}
	}
	return Step{Spent: true, Counts: e.b.seen(now, ls)}
}

// sameMarks reports whether res counted in the windows of b.
func sameMarks(b *block, res *store.Result) bool {
	for i := range b.n {
		if !sameWindow(&b.counts[i], res.Counts[i].Mark) {
			return false
		}
	}
	return true
}

// ended ends the block at now, keeping carry units for the next one:
// what else it held is reported expired.
func (e *Entry[R]) ended(now, carry int64) {
	if e.b.id == 0 {
		return
	}
	if lost := e.b.size - e.b.spent - carry; lost > 0 && e.t.Expired != nil {
		e.t.Expired(lost)
	}
	e.b = block{}
}

// Learn hears the store's answer to a request of the key that it decided
// at now, for the size of the next claim.
func (e *Entry[R]) Learn(now int64, res *store.Result, n int) {
	e.mu.Lock()
	e.learn(now, res, n)
	e.mu.Unlock()
}

func (e *Entry[R]) learn(now int64, res *store.Result, n int) {
	copy(e.known[:n], res.Counts[:n])
	e.knownAt, e.knowing = now, true
}

// Hold takes out of the block, for a request of cost at now that the
// store is to decide, the units it holds when they are fewer than cost:
// the store is then asked only the rest, so that a block's last units
// are spent by a request of a higher cost rather than left to expire.
// It returns them and the marks of the block's windows, to give them
// back with (Give) should the store refuse the rest.
func (e *Entry[R]) Hold(now, cost int64) (units int64, marks store.Marks) {
	e.mu.Lock()
	defer e.mu.Unlock()
	units = e.b.left(now)
	if units <= 0 || units >= cost || !e.b.take(now, units) {
		return 0, marks
	}
	return units, e.b.marks()
}

// Give gives back cost units into the block a decision was made from
// (marks naming its windows, n its limits), or charges -cost to it for a
// negative cost, and reports whether it could: false when the block has
// ended, is another, or does not hold what is asked; the store then
// takes it.
func (e *Entry[R]) Give(now, cost int64, marks *store.Marks, n int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.b.live(now) || !e.b.same(marks, n) {
		return false
	}
	if cost < 0 {
		return e.b.take(now, -cost)
	}
	return e.b.give(cost)
}

// Idle ends a block that nothing was spent from since Idle last looked:
// it returns the units still live (to give back to the store, with the
// marks of its windows and what the caller kept of its claim). A block
// that lives on and was spent from is kept, and its timer runs Idle
// again after IdleAfter.
func (e *Entry[R]) Idle(now int64) (give int64, marks store.Marks, req R) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.b.id == 0 {
		e.armed = false
		return 0, marks, req
	}
	if e.b.live(now) && e.b.spends != e.checked {
		e.checked = e.b.spends
		e.timer.Reset(IdleAfter)
		return 0, marks, req
	}
	e.armed = false
	give, marks, req = e.b.left(now), e.b.marks(), e.req
	if e.b.spent+give < e.b.size && e.t.Expired != nil {
		e.t.Expired(e.b.size - e.b.spent - give)
	}
	e.b = block{}
	if give > 0 && e.giving == nil {
		e.giving = make(chan struct{})
	}
	return give, marks, req
}

// Given says that the give-back of what Idle returned has ended: the
// requests the store refused meanwhile may ask it again (see Refused).
func (e *Entry[R]) Given() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.giving != nil {
		close(e.giving)
		e.giving = nil
		e.gives++
	}
}

// Arm has f run IdleAfter from now, unless it is due already: f calls
// Idle, which has it run again while the block is spent from.
func (e *Entry[R]) Arm(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.armed:
	case e.timer == nil:
		e.timer = time.AfterFunc(IdleAfter, f)
	default:
		e.timer.Reset(IdleAfter)
	}
	e.armed = true
}

// Drop ends the block without a word: the store's counts were reset.
func (e *Entry[R]) Drop() {
	e.mu.Lock()
	e.b = block{}
	e.mu.Unlock()
}

// stale reports whether the entry can go: no block, no claim, no request
// for a second.
func (e *Entry[R]) stale(now int64) bool {
	if !e.mu.TryLock() {
		return false
	}
	defer e.mu.Unlock()
	if e.claiming != nil || e.giving != nil || e.b.live(now) || now-e.rate.last < int64(time.Second) {
		return false
	}
	e.ended(now, 0)
	return true
}

// rate is a key's rate on this replica: the units of its requests per
// nanosecond, first measured over the tick after the key turned hot (the
// gate's own rate until then), then over periods of five ticks at least.
// A key that comes back after five ticks without a request keeps the
// rate it had and measures it again over a tick: a quiet spell averaged
// in would make its blocks tiny, and says nothing of its rate now.
type rate struct {
	units, since, period, last int64
	perNs                      float64
}

func (r *rate) start(now int64) {
	r.units, r.since, r.period, r.last, r.perNs = 0, now, int64(Tick), now, HotUnits/float64(Tick)
}

func (r *rate) add(now, cost int64) {
	if now-r.last > int64(5*Tick) {
		r.units, r.since, r.period = 0, now, int64(Tick)
	}
	r.last = now
	r.units += cost
	if d := now - r.since; d >= r.period {
		r.perNs, r.units, r.since, r.period = float64(r.units)/float64(d), 0, now, int64(5*Tick)
	}
}

func timeOf(ns int64) time.Duration { return time.Duration(ns) }

package ratelimit

import (
	"time"

	"github.com/gatewaykit/ratelimit/internal/keyed"
	"github.com/gatewaykit/ratelimit/internal/owed"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// usageMemory is what this replica last learned from the store of each
// tenant's usage, so that the fallback decides from it rather than from
// zero: a tenant whose month was spent stays refused while the store is
// down, and one with 40 left gets at most this replica's share of those
// 40 (see Limiter.fallbackShare). A limiter with a Fallback keeps one,
// unless its store is local or it counts requests in flight.
//
// An entry is what the store reported after a request, on the limiter's
// monotonic clock: for each limit, what was left and until when that
// holds, the end of the window or period it was learned in (a sliding
// window's count weighs a window longer). What was left is held, not
// aged: a sliding window's count that falls meanwhile is not credited. An
// entry holds for the limits it was learned under, as the over-limit
// cache's do. It is learned only from the store's answers, never on a
// request that a local store decides.
//
// It holds at most as many keys as the Fallback does, by the MaxKeys rule
// (its MaxKeys for a MemoryCounter, else the default 1,000,000). A new key
// that finds its shard full drops the entries that have ended, then the
// live ones that end soonest (see keyed.Map); each live entry dropped is
// counted (Metrics.Snapshot's RememberedEvicted), and its tenant is
// decided by the fallback alone until the store answers for it again.
// About 250 bytes a key.
type usageMemory struct{ m *keyed.Map[learned] }

// learned is one key's entry.
type learned struct {
	under
	n      int // the limits, the main one first
	left   [maxQuotas + 1]int64
	until  [maxQuotas + 1]time.Duration
	counts [maxQuotas + 1]store.Count // as the store reported them
	at     time.Duration              // when, since the limiter's epoch

	// The fallback's quotas (from) at the caps last made of this entry,
	// so that a tenant's requests during an outage share one set.
	from, capped *quotaSet
	caps         [maxQuotas]int64

	// The fallback's plan at the caps last made of this entry.
	lowered *plan
}

// newUsageMemory returns a memory of at most bound keys, counted in m.
func newUsageMemory(bound int, m *Metrics) *usageMemory {
	return &usageMemory{keyed.New[learned](bound, m.rememberedChanged)}
}

// learn records what the store answered (a) for r at now. It allocates
// only for a key it did not hold.
func (u *usageMemory) learn(r *request, a *store.Result, now time.Duration) {
	key := r.Key
	e := learned{under: underOf(r), at: now}
	copy(e.counts[:], a.Counts)
	ls, n := window.Limits(r.Budget)
	e.n = n
	var end time.Duration // when the last of until passes: dropped then
	for j := range n {
		st := a.Counts[j]
		e.left[j] = ls[j].Figures(&st, 0).Remaining
		hold := st.Left
		switch {
		case ls[j].Kind == store.SlidingWindow && ls[j].Calendar == 0:
			hold += st.Length
		case ls[j].Kind == store.TokenBucket && ls[j].Calendar == 0:
			// A bucket refills as time goes: what it held says nothing
			// of what it holds, and the fallback's own bucket, at its
			// share of the rate and the burst, decides it.
			hold = 0
		}
		e.until[j] = now + hold
		end = max(end, e.until[j])
	}
	s := u.m.Lock(key)
	defer s.Unlock()
	held := s.Put(key, end, now)
	e.from, e.capped, e.caps, e.lowered = held.from, held.capped, held.caps, held.lowered // nil for a new key
	*held = e
}

// owedIn returns the windows of the store in which what the fallback
// admits for r at now is owed: each limit's as the
// store last reported it, while that window lasts; none for a bucket,
// which has no windows, or for a limit in which nothing counted. It
// reports false when there is none.
func (u *usageMemory) owedIn(r *request, now time.Duration) (w owed.Windows, ok bool) {
	key := r.Key
	s := u.m.Lock(key)
	defer s.Unlock()
	e, held := s.Get(key, now)
	if !held || e.under != underOf(r) {
		return w, false
	}
	for j := range w.Marks {
		w.Marks[j] = noWindow
	}
	ls, _ := window.Limits(r.Budget)
	for j := range e.n {
		c := &e.counts[j]
		end := e.at + c.Left
		if ls[j].Kind == store.TokenBucket && ls[j].Calendar == 0 || c.N == 0 || now >= end {
			continue
		}
		w.Marks[j], w.Lens[j], w.End, ok = c.Mark, c.Length, max(w.End, end), true
	}
	return w, ok
}

// forget drops key's entry: its counts have been reset.
func (u *usageMemory) forget(key []byte) {
	s := u.m.Lock(key)
	s.Delete(key)
	s.Unlock()
}

// lower lowers f, the fallback's request for r, at now, to share of what
// the store last reported r's tenant has left of each limit, where that
// still holds: f's main limit, and its quotas by a set made for the caps.
// When the cost does not fit in what is left of some limit, it reports
// true, with the store's answer as last learned, aged to now, that limit
// short of the cost, in res.
func (u *usageMemory) lower(r, f *request, res *store.Result, now time.Duration, share func(int64) int64) bool {
	key := r.Key
	s := u.m.Lock(key)
	defer s.Unlock()
	e, ok := s.Get(key, now)
	if !ok || e.under != underOf(r) {
		return false
	}
	var caps [maxQuotas + 1]int64 // what f may spend of each limit, at most
	caps[0] = f.Limit
	for j := 1; j < e.n; j++ {
		caps[j] = f.set().quotas[j-1].Limit
	}
	short := false
	for j := range e.n {
		if now < e.until[j] {
			caps[j] = min(caps[j], share(e.left[j]))
			short = short || caps[j] < f.Cost
		}
	}
	if short {
		e.refusal(r, res, &caps, now)
		return true
	}
	set := f.set()
	if e.n > 1 && [maxQuotas]int64(caps[1:]) != quotaLimits(set) {
		if e.from != set || e.caps != [maxQuotas]int64(caps[1:]) {
			e.from, e.caps, e.capped = set, [maxQuotas]int64(caps[1:]), set.capped(func(i int) int64 { return caps[i+1] })
		}
		set = e.capped
	}
	if caps[0] != f.Limit || set != f.set() {
		if p := e.lowered; p == nil || p.Limit != caps[0] || p.set != set || p.Window != f.Window || p.Burst != f.Burst {
			p := *f.plan
			p.Limit, p.set, p.Quotas, p.fallback = caps[0], set, set.quotasOf(), nil
			e.lowered = &p
		}
		f.setPlan(e.lowered)
	}
	return false
}

// refusal is the store's answer that e learned, aged to now, as a refusal
// of r: each limit of which less than r's cost is left to spend (caps)
// reports only that much left; one whose window has ended since, a
// window of its own to start.
func (e *learned) refusal(r *request, res *store.Result, caps *[maxQuotas + 1]int64, now time.Duration) {
	ls, _ := window.Limits(r.Budget)
	res.Allowed = false
	for j := range e.n {
		if now >= e.until[j] {
			// Ended: a request would start a window of its own.
			c := &e.counts[j]
			res.Counts[j] = store.Count{Fits: true, Left: c.Length, Length: c.Length}
			continue
		}
		st, _ := ls[j].Aged(e.counts[j], now-e.at)
		st.Fits = caps[j] >= r.Cost
		if !st.Fits {
			// Raising the count by k lowers what is left by k.
			st.N += max(ls[j].Figures(&st, r.Cost).Remaining-caps[j], 0)
		}
		res.Counts[j] = st
	}
}

// quotaLimits is the limits of s's quotas.
func quotaLimits(s *quotaSet) (ls [maxQuotas]int64) {
	for i, q := range s.quotas {
		ls[i] = q.Limit
	}
	return ls
}

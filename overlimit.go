package ratelimit

import (
	"time"

	"github.com/gatewaykit/ratelimit/internal/keyed"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// refusals is a limiter's over-limit cache. Once the counter has refused a
// request of a key, the limiter refuses the key's further requests that
// could only be refused too, itself, without asking the counter: a tenant
// flooding at many times its limit then costs the store nothing more once
// its budget is spent. A request that might fit (a cheaper one, or one
// after a sliding window's count has fallen enough) still asks the
// counter.
//
// An entry is what the counter reported, taken at the moment the request
// that learned it arrived, on the limiter's monotonic clock: a fixed
// window's count and end, or a sliding window's counts and position. The
// store's count can only be higher than that (other replicas spend too),
// and its window ends no sooner, so the cache refuses nothing the store
// would allow. An entry holds for the limit, window and algorithm it was
// learned under: a request counted under another (a tenant whose plan
// changed) asks the counter. An entry lasts at most maxRefusalAge, so that
// Limiter.Reset on another replica reaches this one within that time, and
// it holds at most maxRefusals keys: a new key that finds its shard full
// drops the entries that have ended, then the ones that end soonest (see
// keyed.Map).
//
// With quotas, an entry is every limit's count as the counter reported it,
// and a request is refused while its cost does not fit in all of them,
// aged to its time; a window or period that has ended since asks the
// counter.
type refusals struct{ m *keyed.Map[refusal] }

const (
	maxRefusals   = 16 * 1024
	maxRefusalAge = 10 * time.Second
)

// refusal is one key's entry: the limits it was learned under, and what
// the store reported of them.
type refusal struct {
	under
	at     time.Duration // when it was learned, since the limiter's epoch
	counts [maxQuotas + 1]store.Count
}

func newRefusals() *refusals { return &refusals{keyed.New[refusal](maxRefusals, nil)} }

// refuse reports whether the cache refuses r at now, and then writes into
// res what the store reported, aged to now.
func (rs *refusals) refuse(r *request, res *store.Result, now time.Duration) bool {
	key := r.Key
	s := rs.m.Lock(key)
	p, ok := s.Get(key, now)
	if ok && p.under != underOf(r) {
		s.Delete(key) // learned under other limits: a plan changed
		ok = false
	}
	var e refusal
	if ok {
		e = *p // read without the lock, below
	}
	s.Unlock()
	if !ok {
		return false
	}
	return e.refuses(r, res, now)
}

// under is the limits an entry of the cache, or of the fallback's memory,
// was learned under: it holds for requests counted under the same.
type under struct {
	limit  int64
	window time.Duration
	algo   Algorithm
	quotas *quotaSet
}

func underOf(r *request) under { return under{r.Limit, r.Window, r.Algorithm, r.set()} }

// refuses reports whether e refuses r at now: while r's cost does not fit
// in all of its limits, aged to now, which it writes into res. A window
// or period that has ended since asks the store.
func (e *refusal) refuses(r *request, res *store.Result, now time.Duration) bool {
	ls, n := window.Limits(r.Budget)
	all := true
	for j := range n {
		st, live := ls[j].Aged(e.counts[j], now-e.at)
		if !live {
			return false
		}
		st.Fits = ls[j].Fits(&st, r.Cost)
		res.Counts[j] = st
		all = all && st.Fits
	}
	res.Allowed = false
	return !all
}

// add records the refusal a of r, learned at now. It lasts until its
// window ends, or for maxRefusalAge at most.
func (rs *refusals) add(r *request, a *store.Result, now time.Duration) {
	key := r.Key
	e := refusal{under: underOf(r), at: now}
	copy(e.counts[:], a.Counts)
	end := now + maxRefusalAge
	if r.set() == nil {
		// A fixed window refuses until it ends, a sliding one until its
		// count has fallen to nothing.
		main := window.Main(r.Budget)
		end = now + a.Counts[0].Left
		if r.Algorithm == SlidingWindow {
			end = now + main.Slide(&a.Counts[0]).Until(0)
		}
	}
	if end <= now {
		return
	}
	s := rs.m.Lock(key)
	*s.Put(key, min(end, now+maxRefusalAge), now) = e
	s.Unlock()
}

// forget drops key's entry: its counts have been reset or given back.
func (rs *refusals) forget(key []byte) {
	s := rs.m.Lock(key)
	s.Delete(key)
	s.Unlock()
}

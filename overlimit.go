package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
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
// it holds at most refusalShards × refusalsPerShard keys.
//
// With quotas, an entry is every limit's key as the counter reported it,
// and a request is refused while its cost still fits in none of those that
// refused it; a window or period that has ended since asks the counter.
type refusals struct {
	seed   maphash.Seed
	shards [refusalShards]refusalShard
}

const (
	refusalShards    = 16
	refusalsPerShard = 1024
	maxRefusalAge    = 10 * time.Second
)

// refusal is one key's entry.
type refusal struct {
	limit   int64
	window  time.Duration
	algo    Algorithm
	at      time.Duration // when it was learned, since the limiter's epoch
	end     time.Duration // when it stops being of use, since the epoch
	expires time.Duration // when it is dropped: end, or maxRefusalAge after at
	count   int64         // a fixed window's count
	slide   sliding       // a sliding window's key

	quotas *quotaSet
	states [maxQuotas + 1]limitState // with quotas: every limit's key, the main one first
}

type refusalShard struct {
	mu   sync.Mutex
	ends map[string]refusal
	_    [64]byte // keeps shards off each other's cache lines
}

func newRefusals() *refusals { return &refusals{seed: maphash.MakeSeed()} }

func (r *refusals) shard(key []byte) *refusalShard {
	return &r.shards[maphash.Bytes(r.seed, key)%refusalShards]
}

// refuse reports whether the cache refuses t at now, and then fills in
// t's answer.
func (r *refusals) refuse(key []byte, t *take, now time.Duration) bool {
	s := r.shard(key)
	s.mu.Lock()
	e, ok := s.ends[string(key)]
	if ok && (now >= e.expires || e.limit != t.limit || e.window != t.window || e.algo != t.algo || e.quotas != t.quotas) {
		delete(s.ends, string(key))
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	if e.quotas != nil {
		return e.refuseGroup(t, now)
	}
	if e.algo == SlidingWindow {
		state := e.slide.after(now - e.at)
		if state.fits(t.cost, t.limit) {
			return false
		}
		t.decidedSliding(false, state)
		return true
	}
	if e.count+t.cost <= t.limit {
		return false
	}
	t.decided(false, e.count, e.end-now)
	return true
}

// add records the refusal t, learned at now. A full shard first drops the
// entries that have ended, and then, if it is still full, an eighth of its
// keys, which then ask the counter once more.
func (r *refusals) add(key []byte, t *take, now time.Duration) {
	e := refusal{limit: t.limit, window: t.window, algo: t.algo, at: now, count: t.limit - t.remaining, end: now + t.reset}
	if t.algo == SlidingWindow {
		e.slide, e.end = t.slide, now+t.slide.until(0)
	}
	if t.quotas != nil {
		e.quotas, e.end = t.quotas, now+maxRefusalAge
		e.learn(t)
	}
	e.expires = min(e.end, now+maxRefusalAge)
	if e.end <= now {
		return
	}
	s := r.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ends == nil {
		s.ends = make(map[string]refusal)
	}
	if len(s.ends) >= refusalsPerShard {
		for k, old := range s.ends {
			if old.expires <= now {
				delete(s.ends, k)
			}
		}
		for k := range s.ends {
			if len(s.ends) < refusalsPerShard*7/8 {
				break
			}
			delete(s.ends, k)
		}
	}
	s.ends[string(key)] = e
}

// forget drops key's entry: its counts have been reset.
func (r *refusals) forget(key []byte) {
	s := r.shard(key)
	s.mu.Lock()
	delete(s.ends, string(key))
	s.mu.Unlock()
}

// learn records the keys of every limit of t, which has quotas.
func (e *refusal) learn(t *take) {
	ls, n := t.limits()
	for j := range n {
		s := &e.states[j]
		switch {
		case j == 0 && ls[0].sliding:
			s.slide = t.slide
		case j == 0:
			s.count, s.left = t.limit-t.remaining, t.reset
		case ls[j].sliding:
			s.slide = t.q[j-1].slide
		default:
			a := &t.q[j-1]
			s.count, s.left, s.period = a.count, a.reset, a.period
		}
	}
}

// refuseGroup is refuse for an entry with quotas: it refuses t at now
// while t's cost fits in none of the limits that refused it, and fills in
// t's answer from what the entry learned.
func (e *refusal) refuseGroup(t *take, now time.Duration) bool {
	ls, n := t.limits()
	var (
		st   [maxQuotas + 1]limitState
		fits [maxQuotas + 1]bool
		all  = true
	)
	elapsed := now - e.at
	for j := range n {
		s := e.states[j]
		switch {
		case ls[j].sliding:
			s.slide = s.slide.after(elapsed)
			s.count = s.slide.cur
		case s.count == 0 && ls[j].cal == 0:
			// No window runs: a request would start one, of its full
			// length.
		default:
			if s.left -= elapsed; s.left <= 0 {
				return false // its window or period has ended: ask the counter
			}
		}
		st[j], fits[j] = s, ls[j].fits(&s, t.cost)
		all = all && fits[j]
	}
	if all {
		return false
	}
	t.decideGroup(&ls, n, &st, &fits)
	return true
}

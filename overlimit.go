package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
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
// With quotas, an entry is every limit's count as the counter reported it,
// and a request is refused while its cost does not fit in all of them,
// aged to its time; a window or period that has ended since asks the
// counter.
type refusals struct {
	seed   maphash.Seed
	shards [refusalShards]refusalShard
}

const (
	refusalShards    = 16
	refusalsPerShard = 1024
	maxRefusalAge    = 10 * time.Second
)

// refusal is one key's entry: the limits it was learned under, and what
// the store reported of them.
type refusal struct {
	limit   int64
	window  time.Duration
	algo    Algorithm
	quotas  *quotaSet
	at      time.Duration // when it was learned, since the limiter's epoch
	expires time.Duration // when it is dropped: its end, or maxRefusalAge after at
	counts  [maxQuotas + 1]Count
}

type refusalShard struct {
	mu   sync.Mutex
	ends map[string]refusal
	_    [64]byte // keeps shards off each other's cache lines
}

func newRefusals() *refusals { return &refusals{seed: maphash.MakeSeed()} }

func (rs *refusals) shard(key []byte) *refusalShard {
	return &rs.shards[maphash.Bytes(rs.seed, key)%refusalShards]
}

// refuse reports whether the cache refuses r at now, and then what the
// store reported, aged to now.
func (rs *refusals) refuse(key []byte, r *Request, now time.Duration) (Answer, bool) {
	s := rs.shard(key)
	s.mu.Lock()
	e, ok := s.ends[string(key)]
	if ok && (now >= e.expires || e.limit != r.Limit || e.window != r.Window || e.algo != r.Algorithm || e.quotas != r.set) {
		delete(s.ends, string(key))
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return Answer{}, false
	}
	return e.refuses(r, now)
}

// refuses reports whether e refuses r at now: while r's cost does not fit
// in all of its limits, aged to now. A window or period that has ended
// since asks the store.
func (e *refusal) refuses(r *Request, now time.Duration) (a Answer, ok bool) {
	ls, n := e.limits(r)
	all := true
	for j := range n {
		st, live := ls[j].Aged(window.State(e.counts[j]), now-e.at)
		if !live {
			return a, false
		}
		st.Fits = ls[j].Fits(&st, r.Cost)
		a.Counts[j] = Count(st)
		all = all && st.Fits
	}
	return a, !all
}

// limits are the limits of r, main one first, and how many.
func (e *refusal) limits(r *Request) (ls [maxQuotas + 1]window.Limit, n int) {
	ls[0] = r.main()
	if r.set == nil {
		return ls, 1
	}
	return ls, 1 + copy(ls[1:], r.set.lims[kindIndex(r.Algorithm)])
}

// add records the refusal a of r, learned at now. A full shard first
// drops the entries that have ended, and then, if it is still full, an
// eighth of its keys, which then ask the store once more.
func (rs *refusals) add(key []byte, r *Request, a *Answer, now time.Duration) {
	e := refusal{limit: r.Limit, window: r.Window, algo: r.Algorithm, quotas: r.set, at: now, counts: a.Counts}
	end := now + maxRefusalAge
	if r.set == nil {
		// A fixed window refuses until it ends, a sliding one until its
		// count has fallen to nothing.
		main := r.main()
		end = now + a.Counts[0].Left
		if r.Algorithm == SlidingWindow {
			end = now + main.Slide((*window.State)(&a.Counts[0])).Until(0)
		}
	}
	e.expires = min(end, now+maxRefusalAge)
	if end <= now {
		return
	}
	s := rs.shard(key)
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

// forget drops key's entry: its counts have been reset or given back.
func (rs *refusals) forget(key []byte) {
	s := rs.shard(key)
	s.mu.Lock()
	delete(s.ends, string(key))
	s.mu.Unlock()
}

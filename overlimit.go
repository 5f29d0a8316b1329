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
// changed) asks the counter. It holds at most refusalShards ×
// refusalsPerShard keys.
type refusals struct {
	seed   maphash.Seed
	shards [refusalShards]refusalShard
}

const (
	refusalShards    = 16
	refusalsPerShard = 1024
)

// refusal is one key's entry.
type refusal struct {
	limit  int64
	window time.Duration
	algo   Algorithm
	at     time.Duration // when it was learned, since the limiter's epoch
	end    time.Duration // when it stops being of use, since the epoch
	count  int64         // a fixed window's count
	slide  sliding       // a sliding window's key
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
	if ok && (now >= e.end || e.limit != t.limit || e.window != t.window || e.algo != t.algo) {
		delete(s.ends, string(key))
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return false
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
			if old.end <= now {
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

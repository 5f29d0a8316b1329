package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

// refusals is a limiter's over-limit cache. Once the counter has counted a
// key past its limit, every further request in that window is refused
// anyway, so the limiter refuses them itself until the window ends, without
// asking the counter: a tenant flooding at many times its limit then costs
// the store nothing more once its budget is spent.
//
// The end of a window is the time the counter reported it had left, added
// to the moment the request that learned it arrived, on the limiter's
// monotonic clock: never later than the end the store keeps, so the cache
// refuses nothing the store would allow. A cache belongs to one limiter,
// whose Name, Limit and Window are fixed, so its entries are keyed by the
// tenant's key alone; a limiter built with another limit starts empty. It
// holds at most refusalShards × refusalsPerShard keys.
type refusals struct {
	seed   maphash.Seed
	shards [refusalShards]refusalShard
}

const (
	refusalShards    = 16
	refusalsPerShard = 1024
)

type refusalShard struct {
	mu   sync.Mutex
	ends map[string]time.Duration // window ends, since the limiter's epoch
	_    [64]byte                 // keeps shards off each other's cache lines
}

func newRefusals() *refusals { return &refusals{seed: maphash.MakeSeed()} }

func (r *refusals) shard(key []byte) *refusalShard {
	return &r.shards[maphash.Bytes(r.seed, key)%refusalShards]
}

// left reports how long key's window has left when the cache holds a
// refusal for it at now.
func (r *refusals) left(key []byte, now time.Duration) (time.Duration, bool) {
	s := r.shard(key)
	s.mu.Lock()
	end, ok := s.ends[string(key)]
	if ok && end <= now {
		delete(s.ends, string(key))
		ok = false
	}
	s.mu.Unlock()
	return end - now, ok
}

// add records that key is over its limit until end. A full shard first
// drops the windows that have ended, and then, if it is still full, an
// eighth of its keys, which then ask the counter once more.
func (r *refusals) add(key []byte, end, now time.Duration) {
	s := r.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ends == nil {
		s.ends = make(map[string]time.Duration)
	}
	if len(s.ends) >= refusalsPerShard {
		for k, e := range s.ends {
			if e <= now {
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
	s.ends[string(key)] = end
}

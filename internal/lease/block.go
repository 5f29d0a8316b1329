package lease

import (
	"math"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// A block is the units of a key's budget that a replica claimed from the
// store in one call, counted there in every limit of the request. It is
// spent before the first of its windows ends (until); a token bucket's
// is spent unit by unit, unit k before t0 + k × iv, the start of the
// arrival time it reserved: spending it later than that would let the
// replicas together pass the bucket's rate, since the store's bucket
// counts it at that time. A unit passed over is lost.
type block struct {
	id     uint64 // 0: no block
	size   int64  // the units claimed, and any carried over from the block before
	spent  int64  // the units decided from it, less those given back into it
	at     int64  // when it was claimed: the claiming request's time
	until  int64  // it is spent before then: its windows' first end, less the store's slack
	counts [window.MaxLimits]store.Count
	n      int // limits

	bucket bool
	t0, iv float64 // bucket: unit k may be spent until t0 + k × iv
	next   int64   // bucket: the first unit neither spent nor passed over

	spends uint64 // decisions from it, for idleness
}

// live reports whether anything of b can still be spent at now.
func (b *block) live(now int64) bool {
	if b.id == 0 || now >= b.until {
		return false
	}
	if b.bucket {
		return b.first(now) < b.size
	}
	return b.spent < b.size
}

// first is, for a bucket, the first unit that may still be spent at now.
func (b *block) first(now int64) int64 {
	k := b.next
	if late := float64(now) - b.t0; late > 0 {
		k = max(k, int64(math.Ceil(late/b.iv)))
	}
	return k
}

// left is how many units of b can still be spent at now.
func (b *block) left(now int64) int64 {
	if !b.live(now) {
		return 0
	}
	if b.bucket {
		return b.size - b.first(now)
	}
	return b.size - b.spent
}

// take spends cost units of b at now, if it holds them.
func (b *block) take(now, cost int64) bool {
	if b.id == 0 || now >= b.until {
		return false
	}
	if b.bucket {
		k := b.first(now)
		if k+cost > b.size {
			return false
		}
		b.next = k + cost
	} else if b.spent+cost > b.size {
		return false
	}
	b.spent += cost
	b.spends++
	return true
}

// give gives cost units back into b, which it holds as spent; false when
// it does not.
func (b *block) give(cost int64) bool {
	if b.spent < cost {
		return false
	}
	b.spent -= cost
	if b.bucket {
		b.next -= cost // next counts every unit spent
	}
	return true
}

// same reports whether marks name b's windows (a bucket's main limit: b
// itself).
func (b *block) same(marks *store.Marks, n int) bool {
	if n != b.n {
		return false
	}
	for i := range n {
		if i == 0 && b.bucket {
			if marks[0] != int64(b.id) {
				return false
			}
		} else if !sameWindow(&b.counts[i], marks[i]) {
			return false
		}
	}
	return true
}

// sameWindow reports whether mark names the window st was counted in. A
// store may mark one window a little differently from answer to answer
// (RedisCounter marks it on this process's clock by the time the server
// said it had left), and gives back in a window whose mark is within half
// its length (see Store.Give): the next window is a whole length away.
func sameWindow(st *store.Count, mark int64) bool {
	d := st.Mark - mark
	return max(d, -d) < int64(st.Length/2)
}

// marks are the marks a decision from b carries (a bucket's main limit:
// b's name).
func (b *block) marks() (m store.Marks) {
	for i := range b.n {
		m[i] = b.counts[i].Mark
	}
	if b.bucket {
		m[0] = int64(b.id)
	}
	return m
}

// seen is the limits as this replica sees them after a decision from b
// at now, ls being the limits: the store's counts at the claim, less
// what b still holds, aged by the time since.
func (b *block) seen(now int64, ls []window.Limit) (st [window.MaxLimits]store.Count) {
	unspent := b.size - b.spent
	for i := range b.n {
		c := b.counts[i]
		c.Fits = true
		if i == 0 && b.bucket {
			// The store's bucket is full again at + Left; what this
			// replica has not spent or passed over is not spent yet.
			left := float64(b.at) + float64(c.Left) - float64(b.size-b.next)*b.iv - float64(now)
			c = ls[0].Bucket().State(left/1e3, true)
			c.Mark = int64(b.id)
		} else {
			c.N = max(c.N-unspent, 0)
			if aged, ok := ls[i].Aged(c, timeOf(now-b.at)); ok {
				c = aged
			}
		}
		st[i] = c
	}
	return st
}

package redisstore

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gatewaykit/ratelimit/internal/window"
)

// A token bucket's arguments of take.lua (kinds b and B): its interval,
// the most its bucket may be behind now after a caller (the burst's time,
// the callers' delay, and window.BucketOf's Eps for rounding), and the expiry
// its key gets, an upper bound of that in ms, or "0" for the script to
// work it out. A limiter's (or a plan's) bucket without a delay is the
// same every call, so its arguments are formatted once: formatting them
// for each call cost four allocations.
type bucketArgs struct {
	burst, iv, most, px any
}

// bucketSpec is what a bucket's arguments are made of.
type bucketSpec struct {
	burst int64
	iv    float64
	delay int64 // µs
}

// bucketSets keeps the arguments of each bucket without a delay met; past
// maxBucketSets it starts over, as quotaSets does.
var bucketSets struct {
	sync.Map // bucketSpec → *bucketArgs
	n        atomic.Int64
}

const maxBucketSets = 1024

// maxBucketPX is the longest expiry given as an argument: a longer one,
// the script works out from the key's own time.
const maxBucketPX = 1 << 40

// argsOfBucket returns the arguments of the bucket s.
func argsOfBucket(s bucketSpec) *bucketArgs {
	if s.delay == 0 {
		if v, ok := bucketSets.Load(s); ok {
			return v.(*bucketArgs)
		}
	}
	b := window.BucketOf{Interval: s.iv, Tolerance: float64(s.burst) * s.iv, Eps: window.BucketEps(s.iv)}
	most := b.Most(float64(s.delay)) // as window.BucketOf.Take compares
	a := &bucketArgs{burst: hexArg(s.burst), iv: ivArg(s.iv), most: ivArg(most), px: "0"}
	if px := math.Ceil(most/1000) + 1; s.delay == 0 && px <= maxBucketPX {
		a.px = strconv.FormatInt(int64(px), 10)
	}
	if s.delay == 0 {
		if _, loaded := bucketSets.LoadOrStore(s, a); !loaded && bucketSets.n.Add(1) > maxBucketSets {
			bucketSets.Clear()
			bucketSets.n.Store(0)
		}
	}
	return a
}

// ivArg is a bucket's time in µs as the script reads it: a decimal
// fraction that tonumber reads back exactly.
func ivArg(iv float64) string { return strconv.FormatFloat(iv, 'g', -1, 64) }

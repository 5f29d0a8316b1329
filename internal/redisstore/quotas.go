package redisstore

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// quotaArgs is a set of quotas as take.lua reads it, made once: the main
// limit's kind (f a fixed window, s a sliding one) and name, how many
// quotas, and for each its kind (f, s, or a calendar period: d a day, w
// a week, m a month, y a year), its limit in hexadecimal, its window in
// milliseconds (0 for a period) and its name.
// A script call gives it once for all its keys of the set.
type quotaArgs struct {
	n    int // the limits: the main one and the quotas
	args []any
}

// quotaSets keeps the arguments of the quotas of each Budget met, by its
// pointer: a Budget never changes (see store.Budget). Budgets come and go
// (a limiter's plans keep 256 at most, and make them anew past that), so
// past maxQuotaSets the cache starts over: it never holds more, nor keeps
// a Budget alive for good.
var quotaSets struct {
	sync.Map // *store.Budget → *quotaArgs
	n        atomic.Int64
}

const maxQuotaSets = 1024

// argsOf returns the arguments of r's quotas.
func argsOf(r *store.Request) *quotaArgs {
	if v, ok := quotaSets.Load(r.Budget); ok {
		return v.(*quotaArgs)
	}
	a := &quotaArgs{n: 1 + len(r.Quotas)}
	k, main := kindOne[window.Kind(r.Algorithm)], kindOne[window.Kind(r.Algorithm)]
	if r.Algorithm == store.TokenBucket {
		main = "b" // and a quota with a Window counts in fixed windows
	}
	a.args = append(a.args, main, r.Name, hexArg(int64(len(r.Quotas))))
	for _, q := range r.Quotas {
		qk, ms := k, any(window.CeilDiv(q.Window, time.Millisecond))
		switch q.Calendar {
		case store.Day:
			qk, ms = "d", int64(0)
		case store.Week:
			qk, ms = "w", int64(0)
		case store.Month:
			qk, ms = "m", int64(0)
		case store.Year:
			qk, ms = "y", int64(0)
		}
		a.args = append(a.args, qk, strconv.FormatInt(q.Limit, 16), ms, q.Name)
	}
	if _, replaced := quotaSets.Swap(r.Budget, a); !replaced && quotaSets.n.Add(1) > maxQuotaSets {
		quotaSets.Clear()
		quotaSets.n.Store(0)
	}
	return a
}

package redisstore

import (
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The arguments of a set of quotas are made once for its Budget, and the
// cache of them stays bounded however many sets come and go.
func TestQuotaArgsAreCachedAndBounded(t *testing.T) {
	call := func() *store.Request {
		return &store.Request{Cost: 1, Budget: &store.Budget{Name: "default", Limit: 10, Window: time.Minute,
			Quotas: []store.Quota{{Name: "day", Limit: 100, Calendar: store.Day}}}}
	}
	c := call()
	if a, b := argsOf(c), argsOf(c); a != b {
		t.Error("the same set of quotas got its arguments made twice")
	}
	for range 3 * maxQuotaSets {
		argsOf(call())
	}
	n := 0
	quotaSets.Range(func(any, any) bool { n++; return true })
	if n > maxQuotaSets {
		t.Errorf("the cache holds %d sets of quotas, more than %d", n, maxQuotaSets)
	}
}

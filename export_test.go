package ratelimit

import (
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// NewLeaseStore is the store of a limiter with Options.Leases in front of
// s, for the tests of package ratelimit_test (storetest imports the
// package, so only they can run it).
func NewLeaseStore(s store.Store) store.Store {
	l := newLeaseStore(s, nil, time.Now, time.Second)
	if _, local := s.(*MemoryCounter); !local {
		l.slack = time.Millisecond // as Attach sets it
	}
	return l
}

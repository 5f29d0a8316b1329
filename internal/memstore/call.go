package memstore

import (
	"errors"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("memstore: closed")

// Take decides r under r.Key at Nanos(r.Now), and writes what it decided
// into res: res.Allowed, each limit's count in res.Counts (which has room
// for 1+len(r.Quotas) of them), and for InFlight the slots dropped in
// res.Expired. res.Counted is always false: this store decides before it
// counts. The store never keeps r.Key: comparing string(key) does not
// allocate, so a live window costs no allocation. A count changes only
// when the cost fits in every limit.
func (m *Store) Take(r *store.Request, res *store.Result) error {
	res.Expired, res.Counted = 0, false
	switch {
	case r.Algorithm == store.InFlight:
		return m.takeFlight(r, res)
	case len(r.Quotas) > 0:
		return m.takeGroup(r, res)
	case r.Algorithm == store.TokenBucket:
		main := window.Main(r.Budget)
		err := m.TakeBucket(r.Key, main.Bucket(), r.Cost, r.Delay, Nanos(r.Now), &res.Counts[0])
		res.Allowed = res.Counts[0].Fits
		return err
	}
	return m.takeWindow(r, res)
}

// setOf names the quota set of r, which a tenant's entry matches its
// windows to: one Budget's Quotas are the same slice in every request.
func setOf(r *store.Request) *store.Quota { return unsafe.SliceData(r.Quotas) }

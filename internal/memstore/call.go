package memstore

import (
	"errors"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("memstore: closed")

// Take decides c for key, held in a byte slice that the store never keeps:
// comparing string(key) does not allocate, so a live window costs no
// allocation. A count changes only when the cost fits in every limit.
func (m *Store) Take(key []byte, c *window.Call, r *window.Result) error {
	switch {
	case c.Main.Kind == store.InFlight:
		return m.takeFlight(key, c, r)
	case c.Quotas != nil:
		return m.takeGroup(key, c, r)
	case c.Main.Kind == store.TokenBucket:
		err := m.TakeBucket(key, c.Main.Bucket(), c.Cost, c.Delay, Nanos(c.Now), &r.Counts[0])
		r.Allowed = r.Counts[0].Fits
		return err
	}
	return m.takeWindow(key, c, r)
}

// setOf names the quota set of c, which a tenant's entry matches its
// windows to.
func setOf(c *window.Call) *window.Limit { return unsafe.SliceData(c.Quotas) }

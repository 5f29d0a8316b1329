package memstore

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// Requests in flight: a tenant's slots, each held by one request from its
// decision to its Give, or until its lease (the limit's Window) ends. A
// request of cost n holds n slots. Slots whose lease has ended are dropped
// on the way, when the tenant's next request looks, and counted
// (store.Result.Expired).

// flightMark is the width of an entry that heads a flightEntry: no
// window request counts in it (liveFor is false), and the table keeps it
// until its last lease, and a lease more, has ended (keep).
const flightMark = -2

type flightEntry struct {
	entry
	flight flight
}

// flight is a tenant's slots.
type flight struct {
	mu      sync.Mutex
	keep    atomic.Int64 // when the entry may be dropped
	slots   []slot       // under mu; its array is reused, so a live entry allocates nothing
	used    int64        // the slots the requests in slots hold
	soonest int64        // the earliest end of a lease in slots
}

// slot is one request's slots.
type slot struct {
	id        uint64
	cost, end int64
}

// flight returns w's flight, or nil for another entry.
func (w *entry) flight() *flight {
	if w.width != flightMark {
		return nil
	}
	return &(*flightEntry)(unsafe.Pointer(w)).flight
}

// takeFlight decides r, of an InFlight limit: its slots, taken when they
// fit, for a lease of the limit's Window.
func (m *Store) takeFlight(r *store.Request, res *store.Result) error {
	now, lease := Nanos(r.Now), int64(r.Window)
	f, err := m.flightOf(r.Key, now, lease)
	if err != nil {
		return err
	}
	f.mu.Lock()
	res.Expired = f.expire(now)
	allowed := f.used+r.Cost <= r.Limit
	if allowed {
		end := window.AddClamped(now, lease)
		if len(f.slots) == 0 || end < f.soonest {
			f.soonest = end
		}
		f.slots = append(f.slots, slot{id: r.Slot, cost: r.Cost, end: end})
		f.used += r.Cost
		if k := window.AddClamped(end, lease); k > f.keep.Load() {
			f.keep.Store(k)
		}
	}
	used := f.used
	f.mu.Unlock()
	res.Allowed = allowed
	res.Counts[0] = store.Count{N: used, Fits: allowed, Left: r.Window, Length: r.Window}
	return nil
}

// expire drops f's slots whose lease has ended at now, and returns how
// many. It is called with f.mu held.
func (f *flight) expire(now int64) int64 {
	if len(f.slots) == 0 || now < f.soonest {
		return 0
	}
	var gone int64
	kept := f.slots[:0]
	f.soonest = math.MaxInt64
	for _, s := range f.slots {
		if now >= s.end {
			gone += s.cost
			continue
		}
		kept = append(kept, s)
		f.soonest = min(f.soonest, s.end)
	}
	f.slots, f.used = kept, f.used-gone
	return gone
}

// live is how many slots f's requests hold at now: those whose lease has
// ended are left for a take to drop and count.
func (f *flight) live(now int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, s := range f.slots {
		if now < s.end {
			n += s.cost
		}
	}
	return n
}

// give gives back the slots of id in f, unless they are gone, their lease
// having ended.
func (f *flight) give(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.slots {
		if s.id == id {
			last := len(f.slots) - 1
			f.slots[i] = f.slots[last]
			f.slots = f.slots[:last]
			f.used -= s.cost
			return
		}
	}
}

// flightOf returns key's flight at now, made when there is none or it has
// ended, for leases of lease.
func (m *Store) flightOf(key []byte, now, lease int64) (*flight, error) {
	h, i, w, err := m.lookup(key, now)
	if err != nil {
		return nil, err
	}
	if w != nil {
		if f := w.flight(); f != nil && now < f.keep.Load() {
			return f, nil
		}
	}
	var f *flight
	_, err = m.locked(i, h, key, now, 2*lease, func(old *entry, k string) *entry {
		if old != nil {
			if of := old.flight(); of != nil && now < of.keep.Load() {
				f = of // another call made it meanwhile
				return old
			}
		}
		fw := &flightEntry{entry: entry{key: k, hash: h, start: now, end: math.MaxInt64, width: flightMark}}
		f = &fw.flight
		f.keep.Store(window.AddClamped(now, 2*lease))
		return &fw.entry
	})
	return f, err
}

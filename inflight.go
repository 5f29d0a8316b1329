package ratelimit

import (
	"crypto/rand"
	"encoding/hex"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Requests in flight (Algorithm InFlight): a tenant's slots, each held by
// one request from its decision to its Release, or until its lease
// (Window) ends. A request of cost n holds n slots. The counters drop the
// slots whose lease has ended on the way, when the tenant's next request
// looks, and report how many (take.expired), which Metrics counts.
//
// On Redis a tenant's slots are one sorted set under its key, a member per
// slot, scored by the end of its lease on the server's clock: the
// request's token (slotToken), and for a cost of n the token followed by
// ".2" to ".n" for the others (see takeScript, kinds i and y). The key
// expires a lease after the last lease ends, so that a request of the
// tenant in that time still counts the slots it drops.

// flightRetry is what a refusal of a slot says to wait: a slot is free as
// soon as any request of the tenant ends, which no one can foresee.
const flightRetry = time.Second

// slotSeq names the slots of the process's requests, one number each.
var slotSeq atomic.Uint64

// processToken names this process among the replicas that share a Redis:
// random, so that two replicas' slots never share a name.
var processToken = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// slotToken is the member of a Redis sorted set that names slot: the
// process's token and the slot's number.
func slotToken(slot uint64) string {
	var b [len("0123456789abcdef:0123456789abcdef")]byte
	return string(strconv.AppendUint(append(append(b[:0], processToken...), ':'), slot, 16))
}

// decidedFlight fills in t's answer from the slots in use after the
// decision.
func (t *take) decidedFlight(allowed bool, used int64) {
	t.allowed, t.remaining, t.reset = allowed, max(t.limit-used, 0), flightRetry
	t.retry, t.refusedBy = 0, 0
	if !allowed {
		t.retry, t.refusedBy = flightRetry, 1
	}
}

// flightMark is the width of a memWindow that heads a memFlightWindow: no
// window request counts in it (liveFor is false), and the table keeps it
// until its last lease, and a lease more, has ended (keep).
const flightMark = -2

type memFlightWindow struct {
	memWindow
	flight memFlight
}

// memFlight is a tenant's slots in a MemoryCounter.
type memFlight struct {
	mu      sync.Mutex
	keep    atomic.Int64 // when the entry may be dropped, on the counter's clock
	slots   []memSlot    // under mu; its array is reused, so a live entry allocates nothing
	used    int64        // the slots the requests in slots hold
	soonest int64        // the earliest end of a lease in slots
}

// memSlot is one request's slots.
type memSlot struct {
	id        uint64
	cost, end int64
}

// flight returns w's memFlight, or nil for another entry.
func (w *memWindow) flight() *memFlight {
	if w.width != flightMark {
		return nil
	}
	return &(*memFlightWindow)(unsafe.Pointer(w)).flight
}

// takeFlight decides t, of Algorithm InFlight, for key: its slots, taken
// when they fit, for a lease of t.window.
func (m *MemoryCounter) takeFlight(key []byte, t *take) error {
	now := int64(m.clock.elapsed())
	f, err := m.flightEntry(key, now, int64(t.window))
	if err != nil {
		return err
	}
	f.mu.Lock()
	t.expired = f.expire(now)
	allowed := f.used+t.cost <= t.limit
	if allowed {
		end := addClamped(now, int64(t.window))
		if len(f.slots) == 0 || end < f.soonest {
			f.soonest = end
		}
		f.slots = append(f.slots, memSlot{id: t.slot, cost: t.cost, end: end})
		f.used += t.cost
		if k := addClamped(end, int64(t.window)); k > f.keep.Load() {
			f.keep.Store(k)
		}
	}
	used := f.used
	f.mu.Unlock()
	t.decidedFlight(allowed, used)
	return nil
}

// expire drops f's slots whose lease has ended at now, and returns how
// many. It is called with f.mu held.
func (f *memFlight) expire(now int64) int64 {
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

// live is how many slots f's requests hold at now, for Usage: those whose
// lease has ended are left for a take to drop and count.
func (f *memFlight) live(now int64) int64 {
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

// releaseSlot gives back slot's slots in f, and returns how many: 0 when
// they are gone, their lease having ended.
func (f *memFlight) releaseSlot(slot uint64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.slots {
		if s.id == slot {
			last := len(f.slots) - 1
			f.slots[i] = f.slots[last]
			f.slots = f.slots[:last]
			f.used -= s.cost
			return s.cost
		}
	}
	return 0
}

// flightEntry returns key's memFlight at now, made when there is none or
// it has ended, for leases of lease.
func (m *MemoryCounter) flightEntry(key []byte, now, lease int64) (*memFlight, error) {
	h, i, w, err := m.lookup(key, now)
	if err != nil {
		return nil, err
	}
	if w != nil {
		if f := w.flight(); f != nil && now < f.keep.Load() {
			return f, nil
		}
	}
	var f *memFlight
	_, err = m.locked(i, h, key, now, 2*lease, func(old *memWindow, k string) *memWindow {
		if old != nil {
			if of := old.flight(); of != nil && now < of.keep.Load() {
				f = of // another call made it meanwhile
				return old
			}
		}
		fw := &memFlightWindow{memWindow: memWindow{key: k, hash: h, start: now, end: math.MaxInt64, width: flightMark}}
		f = &fw.flight
		f.keep.Store(addClamped(now, 2*lease))
		return &fw.memWindow
	})
	return f, err
}

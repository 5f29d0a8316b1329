package memstore

import (
	"math"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// A token bucket (store.TokenBucket) without quotas: one entry whose count
// holds the bits of its theoretical arrival time (TAT), in microseconds on
// the store's clock as a float (see window.BucketOf), and changes by
// compare-and-swap, only when a cost fits. Its width is bucketMark, so
// that no window counts in it; it is kept until a second past its TAT
// (when it is as good as none), so that a call that found it live never
// counts in an entry a rebuild has dropped.

// bucketMark is the width of a token bucket's entry.
const bucketMark = -3

// bucketSlack is how long a bucket's entry outlives its TAT; a call
// counts in it only while it has half that left, in µs.
const (
	bucketSlack       = int64(time.Second)
	bucketSlackMicros = float64(bucketSlack) / 2e3
)

// micros is t, in nanoseconds on a Store's clock, in microseconds.
func micros(t int64) float64 { return float64(t) * 1e-3 }

// tat is w's theoretical arrival time, in microseconds.
func (w *entry) tat() float64 { return math.Float64frombits(uint64(w.count.Load())) }

// TakeBucket decides a request of cost in key's token bucket b, at now
// on the store's clock (see Nanos), when the caller may wait delay for its
// turn, and writes the bucket's state after the decision to st: Take's
// short way for a bucket without quotas, as TakeWindow is a window's.
func (m *Store) TakeBucket(key []byte, b window.BucketOf, cost int64, delay time.Duration, now int64, st *store.Count) error {
	at := micros(now)
	w, err := m.bucket(key, &b, now, at)
	if err != nil {
		return err
	}
	for {
		bits := w.count.Load()
		left := math.Float64frombits(uint64(bits)) - at
		after, fits := b.Take(left, cost, micros(int64(delay)))
		if !fits || w.count.CompareAndSwap(bits, int64(math.Float64bits(at+after))) {
			*st = b.State(after, fits)
			return nil
		}
	}
}

// bucket returns key's token bucket entry, made (full) when there is
// none, at now (at in µs).
func (m *Store) bucket(key []byte, b *window.BucketOf, now int64, at float64) (*entry, error) {
	h, si, w, err := m.lookup(key, now)
	if err != nil {
		return nil, err
	}
	if w != nil && w.width == bucketMark && at < w.tat()+bucketSlackMicros {
		// Kept (bucketKeep) for a while yet: no rebuild drops it under us.
		return w, nil
	}
	// A full bucket fills in no time; the tolerance bounds how long an
	// entry lives after its last request, as a window's length does.
	life := int64(b.Tolerance*1e3) + bucketSlack
	return m.locked(si, h, key, now, life, func(old *entry, k string) *entry {
		if old != nil && old.width == bucketMark && now < old.keep() {
			return old
		}
		nw := &entry{key: k, hash: h, start: now, end: math.MaxInt64, width: bucketMark}
		nw.count.Store(int64(math.Float64bits(micros(now))))
		return nw
	})
}

// bucketKeep is when w, a bucket's entry, may be dropped: a while after
// it is full again.
func (w *entry) bucketKeep() int64 {
	return window.AddClamped(int64(math.Min(w.tat()*1e3, math.MaxInt64/2)), bucketSlack)
}

// giveBucket gives back cost in key's bucket w (a negative cost charges
// it), at now.
func giveBucket(w *entry, l *window.Limit, cost, now int64) {
	b, at := l.Bucket(), micros(now)
	for {
		bits := w.count.Load()
		left := b.Give(math.Float64frombits(uint64(bits))-at, cost)
		if w.count.CompareAndSwap(bits, int64(math.Float64bits(at+left))) {
			return
		}
	}
}

// bucketLeft is what a bucket's sub in a group holds: its TAT, from
// which the time until it is full again is read at now.
func (s *sub) bucketLeft(now int64) float64 {
	return math.Float64frombits(uint64(s.count)) - micros(now)
}

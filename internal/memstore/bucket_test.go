package memstore

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// A token bucket's entry changes by compare-and-swap from the state its
// caller decided from: 8 goroutines taking 1,000 each at once from a
// bucket of 2,000 an hour, on a stopped clock (nothing comes back), are
// allowed exactly 2,000 between them; and 8 giving back at once 2,000 in
// all into the spent bucket fill it again exactly, so that 2,000 more
// fit, and no more. A swap against a fresh load instead would lose
// another goroutine's update. Goroutines meet only while they run side by
// side, which a busy machine makes rare: the test runs rounds, each on a
// bucket of its own, and the goroutines of a round start together.
func TestBucketExactUnderConcurrency(t *testing.T) {
	for round := range 100 {
		testBucketExactUnderConcurrency(t, []byte("rl:bucket:"+strconv.Itoa(round)))
	}
}

func testBucketExactUnderConcurrency(t *testing.T, key []byte) {
	t.Helper()
	const goroutines, each, burst = 8, 1000, 2000
	m := &Store{}
	budget := &store.Budget{Algorithm: store.TokenBucket, Limit: burst, Window: time.Hour, Burst: burst}
	main := window.Main(budget)
	b := main.Bucket()
	at := newFakeClock().Now()
	now := Nanos(at)
	take := func() bool {
		var st store.Count
		if err := m.TakeBucket(key, b, 1, 0, now, &st); err != nil {
			t.Error(err)
			return false
		}
		return st.Fits
	}
	// together runs f each times on each of the goroutines, which start
	// once all are running.
	together := func(f func()) {
		var wg sync.WaitGroup
		var ready atomic.Int32
		for range goroutines {
			wg.Go(func() {
				for ready.Add(1); ready.Load() < goroutines; {
					runtime.Gosched()
				}
				for range each {
					f()
				}
			})
		}
		wg.Wait()
	}

	var allowed atomic.Int64
	together(func() {
		if take() {
			allowed.Add(1)
		}
	})
	if n := allowed.Load(); n != burst {
		t.Fatalf("%s: %d × %d takes at once from a bucket of %d: %d allowed, want exactly %d", key, goroutines, each, burst, n, burst)
	}

	var given atomic.Int64
	together(func() {
		if given.Add(1) <= burst {
			if err := m.Give(&store.Request{Budget: budget, Key: key, Cost: 1, Now: at}, store.Marks{}); err != nil {
				t.Error(err)
			}
		}
	})
	n := 0
	for take() {
		n++
		if n > burst {
			break
		}
	}
	if n != burst {
		t.Fatalf("%s: after %d give-backs at once into the spent bucket, %d takes fit; want exactly %d", key, burst, n, burst)
	}
}

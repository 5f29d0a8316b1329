package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// The MemoryCounter's table, its bound and its sweeps are the engine's, and
// are tested there (internal/memstore). What a user of the counter meets:

func TestMemoryCounterClose(t *testing.T) {
	m := NewMemoryCounter()
	if _, err := m.Incr(context.Background(), "rl:acme", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := m.Incr(context.Background(), "rl:acme", time.Minute); !errors.Is(err, errClosed) {
		t.Fatalf("Incr after Close = %v, want errClosed", err)
	}
	b := &store.Budget{Prefix: "rl:", Name: "default", Algorithm: store.FixedWindow, Limit: 10, Window: time.Minute}
	r := store.Request{Budget: b, Key: []byte("rl:acme"), Tenant: "acme", Cost: 1, Now: time.Now()}
	res := store.Result{Counts: make([]store.Count, 1+len(b.Quotas))}
	if err := m.Take(context.Background(), &r, &res); !errors.Is(err, errClosed) {
		t.Fatalf("Take after Close = %v, want errClosed", err)
	}
}

func TestMemoryCounterZeroValue(t *testing.T) {
	var m MemoryCounter
	for want := int64(1); want <= 2; want++ {
		if got, err := m.Incr(context.Background(), "rl:acme", time.Minute); err != nil || got != want {
			t.Fatalf("Incr #%d on a zero MemoryCounter = %d, %v; want %d", want, got, err, want)
		}
	}
	lim := NewLimiter(Options{Counter: &m, Limit: 1, Window: time.Minute})
	if d := lim.Take(context.Background(), "globex"); !d.Allowed {
		t.Fatalf("a limiter on a zero MemoryCounter: %+v", d)
	}
}

func TestMaxKeysPanics(t *testing.T) {
	for _, n := range []int{0, -1} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratelimit: MaxKeys ") {
					t.Errorf("MaxKeys(%d) panicked with %q, want a message naming MaxKeys", n, msg)
				}
			}()
			MaxKeys(n)
		}()
	}
}

package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// GiveBack returns units to a tenant without the Decision that took
// them, in every limit of its plan, never below nothing spent. These run
// on a MemoryCounter and on real Redis (single node, cluster, ring), in
// both windows.

func TestGiveBackReturnsUnitsInEveryLimit(t *testing.T) {
	opts := Options{Limit: 10, Window: time.Minute, Quotas: dayAndMonth(50, 100)}
	eachTakeSubject(t, opts, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		// A give-back finds the windows running when it reads: the test's
		// steps stay in one minute of the store's clock, where a sliding
		// window's minutes are aligned.
		if now := storeClock(t, lim)(); now.Truncate(time.Minute).Add(time.Minute).Sub(now) < 2*time.Second {
			advance(now.Truncate(time.Minute).Add(time.Minute).Sub(now) + 2*time.Millisecond)
		}
		ctx := context.Background()
		if d := lim.TakeN(ctx, tenant, 7); !d.Allowed {
			t.Fatalf("TakeN(7): %+v", d)
		}
		if err := lim.GiveBack(ctx, tenant, 3); err != nil {
			t.Fatalf("GiveBack(3): %v", err)
		}
		expectUsed(t, lim, tenant, 4, 4, 4)
		// More than was spent: nothing spent, never a credit.
		if err := lim.GiveBack(ctx, tenant, 10); err != nil {
			t.Fatalf("GiveBack(10): %v", err)
		}
		expectUsed(t, lim, tenant, 0, 0, 0)
		for range 10 {
			takeExpect(t, lim, tenant, true, "")
		}
		takeExpect(t, lim, tenant, false, "default")
		takeExpect(t, lim, tenant, false, "default") // the over-limit cache's, on Redis
		// A give-back forgets the cached refusal: the unit is there at once.
		if err := lim.GiveBack(ctx, tenant, 1); err != nil {
			t.Fatalf("GiveBack(1): %v", err)
		}
		takeExpect(t, lim, tenant, true, "")
		takeExpect(t, lim, tenant, false, "default")
		expectUsed(t, lim, tenant, 10, 10, 10)
	})
}

// A tenant that spent nothing has nothing to give back: no window is
// started, and the full limit stays.
func TestGiveBackToNothingSpent(t *testing.T) {
	eachTakeSubject(t, Options{Limit: 3, Window: time.Minute}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		if err := lim.GiveBack(context.Background(), tenant, 5); err != nil {
			t.Fatalf("GiveBack(5): %v", err)
		}
		expectUsed(t, lim, tenant, 0)
		for range 3 {
			takeExpect(t, lim, tenant, true, "")
		}
		takeExpect(t, lim, tenant, false, "default")
	})
}

// A token bucket's give-back pulls its arrival time earlier: what a
// drained bucket gets back can be spent at once, and no more. The rate,
// 10 an hour, refills nothing meanwhile.
func TestGiveBackTokenBucket(t *testing.T) {
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			c, clock := s.counter(t)
			o := Options{Limit: 10, Window: time.Hour, Algorithm: TokenBucket, Counter: c, Logger: newLogRecorder().logger()}
			var lim *Limiter
			if clock != nil {
				lim = newLimiter(o, clock.Now)
			} else {
				lim = NewLimiter(o)
			}
			ctx, tenant := context.Background(), uniqueTenant(t)
			if d := lim.TakeN(ctx, tenant, 10); !d.Allowed {
				t.Fatalf("TakeN(10): %+v", d)
			}
			if d := lim.Take(ctx, tenant); d.Allowed {
				t.Fatalf("a drained bucket allowed a request: %+v", d)
			}
			if err := lim.GiveBack(ctx, tenant, 4); err != nil {
				t.Fatalf("GiveBack(4): %v", err)
			}
			if d := lim.TakeN(ctx, tenant, 5); d.Allowed {
				t.Fatalf("5 allowed after 4 given back: %+v", d)
			}
			if d := lim.TakeN(ctx, tenant, 4); !d.Allowed {
				t.Fatalf("4 refused after 4 given back: %+v", d)
			}
		})
	}
}

func TestGiveBackMistakes(t *testing.T) {
	ctx := context.Background()
	lim := NewLimiter(Options{Limit: 3, Window: time.Minute, Counter: NewMemoryCounter()})
	if err := lim.GiveBack(ctx, "a", -1); err == nil || !strings.Contains(err.Error(), "below 0") {
		t.Errorf("GiveBack(-1): %v, want an error that n is below 0", err)
	}
	if err := lim.GiveBack(ctx, "a", 0); err != nil {
		t.Errorf("GiveBack(0): %v, want nil", err)
	}
	flight := NewLimiter(Options{Limit: 3, Window: time.Minute, Algorithm: InFlight, Counter: NewMemoryCounter()})
	if err := flight.GiveBack(ctx, "a", 1); err == nil || !strings.Contains(err.Error(), "InFlight") {
		t.Errorf("GiveBack on InFlight: %v, want an error naming InFlight", err)
	}
	counter := NewLimiter(Options{Limit: 3, Window: time.Minute, Counter: CounterStore(NewMemoryCounter())})
	if err := counter.GiveBack(ctx, "a", 1); err == nil || !strings.Contains(err.Error(), "CounterStore") {
		t.Errorf("GiveBack on a CounterStore: %v, want an error naming CounterStore", err)
	}
}

// A GiveBack whose read fails says so in the log, once, as a failed
// give-back does, and returns the error.
func TestGiveBackLogsAFailedRead(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	logs := newLogRecorder()
	lim := NewLimiter(Options{Limit: 3, Window: time.Minute, Counter: NewRedisCounter(rdb), Logger: logs.logger()})
	if err := lim.GiveBack(context.Background(), "t", 1); err == nil {
		t.Fatal("GiveBack on a refused port: nil error")
	}
	if got := logs.withMsg("ratelimit: counter failed to read the windows to give back in"); len(got) != 1 {
		t.Fatalf("log lines about the failed read: %v, want one; all: %v", got, logs.lines())
	}
}

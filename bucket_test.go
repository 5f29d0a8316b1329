package ratelimit

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The token bucket on every store: see eachReplicaSubject.
func eachBucketSubject(t *testing.T, opts Options, f func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration))) {
	opts.Algorithm = TokenBucket
	eachReplicaSubject(t, opts, f)
}

// Limit 100 per 10 s, Burst 100: 600 requests at once over three replicas
// let exactly 100 through, and as many more as came back while the burst
// ran; a second later, on the store's clock, another 600 at once let
// through what came back meanwhile (10, or 11 with the time the bursts
// took). A unit comes back every 100 ms, and a burst of 600 under -race on
// a busy machine can take longer than that: what came back is measured on
// the store's clock around each burst.
func TestTokenBucketBurstAcrossReplicas(t *testing.T) {
	// 600 requests at once under -race on a busy machine: this test is
	// about counting, not time.
	opts := Options{Limit: 100, Window: 10 * time.Second, StoreTimeout: 5 * time.Second}
	interval := opts.Window / time.Duration(opts.Limit)
	eachBucketSubject(t, opts, func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration)) {
		now := storeClock(t, lims[0])
		// units is how many come back in d, whole.
		units := func(d time.Duration) int64 { return int64(d / interval) }
		before1 := now()
		counted, allowed1 := burstAtOnce(lims, tenant, 600)
		after1 := now()
		if most := 100 + units(after1.Sub(before1)); counted != 600 || allowed1 < 100 || allowed1 > most {
			t.Fatalf("first burst: %d of 600 decided by the store, %d allowed in %v; want all, 100 allowed and at most %d (what came back meanwhile)",
				counted, allowed1, after1.Sub(before1), most)
		}
		advance(time.Second)
		before2 := now()
		counted, allowed2 := burstAtOnce(lims, tenant, 600)
		after2 := now()
		// At least what came back between the bursts; in all, no more
		// than the burst and what came back from the first burst's start
		// to the second's end.
		least, most := units(before2.Sub(after1)), 100+units(after2.Sub(before1))
		if counted != 600 || allowed2 < least || allowed1+allowed2 > most {
			t.Fatalf("%v later: %d of 600 decided by the store, %d allowed (%d before); want all, at least %d and at most %d in both bursts",
				before2.Sub(after1), counted, allowed2, allowed1, least, most)
		}
		if least < 10 {
			t.Fatalf("the store's clock moved %v between the bursts; want a second at least", before2.Sub(after1))
		}
	})
}

// A cost above the burst never fits: it is refused at once, without a
// RetryAfter (it would never come true) and without touching the key.
// One at the burst fits a rested bucket; a refused one writes nothing,
// and the RetryAfter of a refusal comes true.
func TestTokenBucketCostsAndRetryAfter(t *testing.T) {
	opts := Options{Limit: 10, Window: time.Second, Burst: 5}
	eachBucketSubject(t, opts, func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		lim := lims[0]
		d := lim.TakeN(ctx, tenant, 6)
		if d.Allowed || d.RetryAfter != 0 || d.Remaining != -1 {
			t.Fatalf("cost 6 at burst 5: %+v; want refused at once, RetryAfter 0", d)
		}
		if u, err := lim.Usage(ctx, tenant); err != nil || u[0].Remaining != 5 || u[0].Used != 0 {
			t.Fatalf("after a cost above the burst: %+v, %v; want the bucket untouched, 5 left", u, err)
		}
		if d := lim.TakeN(ctx, tenant, 5); !d.Allowed || d.Remaining != 0 || d.Reset <= 400*time.Millisecond || d.Reset > 500*time.Millisecond {
			t.Fatalf("cost 5 at burst 5: %+v; want allowed, nothing left, full again in 0.5 s", d)
		}
		d = lim.TakeN(ctx, tenant, 3)
		if d.Allowed || d.RetryAfter < 200*time.Millisecond || d.RetryAfter > 300*time.Millisecond {
			t.Fatalf("cost 3 on an empty bucket: %+v; want refused, RetryAfter about 0.3 s (three units at 10 a second)", d)
		}
		if u, err := lim.Usage(ctx, tenant); err != nil || u[0].Used != 5 && u[0].Used != 4 {
			t.Fatalf("after a refusal: %+v, %v; want the 5 spent, no more", u, err)
		}
		advance(d.RetryAfter)
		if d := lims[1].TakeN(ctx, tenant, 3); !d.Allowed {
			t.Fatalf("cost 3 after the RetryAfter: %+v; want allowed", d)
		}
	})
}

// Quotas are decided all or nothing with the bucket: a request the quota
// refuses spends nothing of the bucket. Release gives back in both, Usage
// reports both, Reset fills the bucket.
func TestTokenBucketWithQuotas(t *testing.T) {
	opts := Options{Limit: 10, Window: time.Second, Quotas: []Quota{{Name: "hour", Limit: 3, Window: time.Hour}}}
	eachBucketSubject(t, opts, func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		var last Decision
		for i := range 3 {
			if last = lims[i].Take(ctx, tenant); !last.Allowed {
				t.Fatalf("request %d: %+v; want allowed", i+1, last)
			}
		}
		if d := lims[0].Take(ctx, tenant); d.Allowed || d.Policy != "hour" {
			t.Fatalf("the quota's fourth: %+v; want refused by the quota", d)
		}
		u, err := lims[1].Usage(ctx, tenant)
		if err != nil || len(u) != 2 || u[0].Remaining != 7 || u[1].Used != 3 {
			t.Fatalf("Usage: %+v, %v; want the bucket at 7 of 10 (the refusal spent nothing) and the quota at 3", u, err)
		}
		if err := lims[2].Release(ctx, last); err != nil {
			t.Fatal(err)
		}
		if u, err := lims[1].Usage(ctx, tenant); err != nil || u[0].Remaining != 8 || u[1].Used != 2 {
			t.Fatalf("Usage after a Release: %+v, %v; want the bucket at 8 and the quota at 2", u, err)
		}
		if err := lims[0].Reset(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		if u, err := lims[1].Usage(ctx, tenant); err != nil || u[0].Remaining != 10 || u[1].Used != 0 {
			t.Fatalf("Usage after a Reset: %+v, %v; want both whole", u, err)
		}
	})
}

// A bucket beside a quota reserves a waiter's turn as a bucket alone
// does: at 10 a second, Burst 1, two callers of Wait after a request each
// get a turn (a tenth of a second apart), counted in the quota too, on
// every store; a bound that left the delay out would refuse them.
func TestTokenBucketWaitWithQuotas(t *testing.T) {
	opts := Options{Limit: 10, Window: time.Second, Burst: 1, Quotas: []Quota{{Name: "hour", Limit: 100, Window: time.Hour}}}
	eachBucketSubject(t, opts, func(t *testing.T, lims []*Limiter, tenant string, _ func(time.Duration)) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if d := lims[0].Take(ctx, tenant); !d.Allowed {
			t.Fatalf("the first: %+v; want allowed", d)
		}
		for i := range 2 {
			if d, err := lims[1+i].Wait(ctx, tenant); err != nil || !d.Allowed {
				t.Fatalf("wait %d: %+v, %v; want allowed in its turn", i+1, d, err)
			}
		}
		if u, err := lims[0].Usage(ctx, tenant); err != nil || len(u) != 2 || u[1].Used != 3 {
			t.Fatalf("Usage: %+v, %v; want the quota at 3", u, err)
		}
	})
}

// A plan's Burst (or its Limit, when it has none and Options has none)
// is the tenant's; shadow mode lets through what the bucket refuses.
func TestTokenBucketPlansAndShadow(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	plans := map[string]Plan{"small": {Limit: 2}, "bursty": {Limit: 2, Burst: 6}}
	rec := newLogRecorder()
	lim := newLimiter(Options{Limit: 100, Window: time.Second, Algorithm: TokenBucket, Counter: newMemoryCounter(clock.Now),
		PlanFor: func(tenant string) Plan { return plans[tenant] }, Logger: rec.logger()}, clock.Now)
	for tenant, want := range map[string]int{"small": 2, "bursty": 6, "other": 100} {
		n := 0
		for lim.Take(ctx, tenant).Allowed {
			n++
		}
		if n != want {
			t.Errorf("tenant %s: %d allowed at once; want %d", tenant, n, want)
		}
	}
	plans["bad"] = Plan{Burst: -1}
	if d := lim.Take(ctx, "bad"); d.By != ByCounter || d.Limit != 100 || d.Remaining != 99 {
		t.Errorf("a plan with Burst -1: %+v; want decided by the limiter's own bucket of 100", d)
	}
	if lines := rec.withMsg("ratelimit: PlanFor gave no valid plan"); len(lines) != 1 || !strings.Contains(lines[0].str("err"), "Burst") {
		t.Errorf("log %v; want the plan's Burst named", rec.lines())
	}
	shadow := newLimiter(Options{Limit: 1, Window: time.Second, Algorithm: TokenBucket, Shadow: true,
		Counter: newMemoryCounter(clock.Now), Logger: newLogRecorder().logger()}, clock.Now)
	shadow.Take(ctx, "a")
	if d := shadow.Take(ctx, "a"); !d.Allowed || !d.Shadowed {
		t.Errorf("shadow mode over the burst: %+v; want let through, shadowed", d)
	}
}

// The fallback decides a token bucket in its proportion of the rate and
// of the burst.
func TestTokenBucketFallbackProportion(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	down := scriptedStore{&scripted{err: errors.New("connection refused")}}
	lim := newLimiter(Options{Limit: 100, Burst: 50, Window: time.Second, Algorithm: TokenBucket, Counter: down,
		Fallback: newMemoryCounter(clock.Now), FallbackLimit: 10, Logger: newLogRecorder().logger()}, clock.Now)
	n := 0
	for d := lim.Take(ctx, "a"); d.Allowed; d = lim.Take(ctx, "a") {
		if d.By != ByFallback || d.Limit != 10 {
			t.Fatalf("%+v; want decided by the fallback at its limit of 10", d)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("%d allowed at once by the fallback; want 5, its share of the burst of 50", n)
	}
	clock.Advance(100 * time.Millisecond) // one unit at 10 a second
	if d := lim.Take(ctx, "a"); !d.Allowed {
		t.Fatalf("a tenth of a second later: %+v; want allowed, at the fallback's rate", d)
	}
}

// What the response says of a bucket: the policy is Limit per Window, r
// the whole units it holds, t the seconds until it is full.
func TestTokenBucketHeaders(t *testing.T) {
	clock := newFakeClock()
	lim := newLimiter(Options{Limit: 10, Window: time.Minute, Burst: 4, Algorithm: TokenBucket, Counter: newMemoryCounter(clock.Now)}, clock.Now)
	ctx := context.Background()
	lim.Take(ctx, "a")
	d := lim.Take(ctx, "a") // two spent: 2 left, full in 12 s (6 s a unit)
	rec := httptest.NewRecorder()
	d.SetHeaders(rec.Header())
	h := rec.Header()
	for name, want := range map[string]string{
		"RateLimit-Policy":      `"default";q=10;w=60`,
		"RateLimit":             `"default";r=2;t=12`,
		"X-RateLimit-Limit":     "10",
		"X-RateLimit-Remaining": "2",
		"X-RateLimit-Reset":     "12",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: %q; want %q", name, got, want)
		}
	}
}

// Setup refuses a Burst on another algorithm, or out of bounds, naming
// the field.
func TestTokenBucketSetup(t *testing.T) {
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{Limit: 1, Window: time.Second, Burst: 2}, "Burst is set, but Algorithm is fixed window"},
		{Options{Limit: 1, Window: time.Second, Burst: -1, Algorithm: TokenBucket}, "Burst must be between 1 and 2^53"},
		{Options{Limit: 1, Window: time.Second, Algorithm: Algorithm(9)}, "TokenBucket"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), tt.want) {
					t.Errorf("NewLimiter(%+v): panic %v; want one saying %q", tt.opts, r, tt.want)
				}
			}()
			NewLimiter(tt.opts)
		}()
	}
}

// When Redis goes away mid-way, the fallback decides a bucket from a
// bucket of its own, at its share of the rate and the burst: what the
// store last reported of the bucket says nothing of what has come back
// since, so it is not remembered as a window's count is.
func TestTokenBucketFallbackAfterAnOutage(t *testing.T) {
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 10, Window: time.Second, Burst: 4, Algorithm: TokenBucket,
		Fallback: NewMemoryCounter(), FallbackLimit: 5, Logger: newLogRecorder().logger()})
	for range 4 {
		if d := lim.Take(ctx, "a"); !d.Allowed || d.By != ByCounter {
			t.Fatalf("%+v; want allowed by Redis", d)
		}
	}
	srv.Stop()
	for i := range 2 { // the fallback's burst: 4 × 5/10
		if d := lim.Take(ctx, "a"); !d.Allowed || d.By != ByFallback {
			t.Fatalf("request %d with Redis gone: %+v; want allowed by the fallback's own bucket", i+1, d)
		}
	}
	d := lim.Take(ctx, "a")
	if d.Allowed || d.By != ByFallback || d.RetryAfter <= 0 || d.RetryAfter > 200*time.Millisecond {
		t.Fatalf("past the fallback's burst: %+v; want refused by it, RetryAfter within its interval of 0.2 s", d)
	}
}

// Settle in a bucket: a request taken at cost 1 and settled at 50, at 10
// a second with a burst of 10, leaves a debt of 40 units past the burst:
// the next request waits 4.1 s (4 s of debt, and its own tenth), and a
// give-back of what was charged pays it off. A give-back never fills the
// bucket past full.
func TestTokenBucketSettle(t *testing.T) {
	eachBucketSubject(t, Options{Limit: 10, Window: time.Second}, func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		d := lims[0].TakeN(ctx, tenant, 1)
		if err := lims[0].Settle(ctx, d, 50); err != nil {
			t.Fatal(err)
		}
		next := lims[2].Take(ctx, tenant)
		if next.Allowed || next.RetryAfter < 4*time.Second || next.RetryAfter > 4100*time.Millisecond {
			t.Fatalf("after settling at 50: %+v; want refused, RetryAfter about 4.1 s", next)
		}
		settled := d
		settled.cost = 50
		if err := lims[0].Settle(ctx, settled, 1); err != nil { // back to 1: the debt given back
			t.Fatal(err)
		}
		if u, err := lims[2].Usage(ctx, tenant); err != nil || u[0].Remaining != 9 {
			t.Fatalf("after settling back at 1: %+v, %v; want 9 of 10 left", u, err)
		}
		if err := lims[0].Settle(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
		if err := lims[0].Release(ctx, d); err != nil {
			t.Fatal(err)
		}
		if u, err := lims[2].Usage(ctx, tenant); err != nil || u[0].Remaining != 10 || u[0].Reset != 0 {
			t.Fatalf("after giving back more than was taken: %+v, %v; want the bucket full, no more", u, err)
		}
	})
	// On the fake clock, the debt is waited out to the tenth of a second.
	clock := newFakeClock()
	lim := newLimiter(Options{Limit: 10, Window: time.Second, Algorithm: TokenBucket, Counter: newMemoryCounter(clock.Now)}, clock.Now)
	ctx := context.Background()
	if err := lim.Settle(ctx, lim.Take(ctx, "a"), 50); err != nil {
		t.Fatal(err)
	}
	clock.Advance(4 * time.Second)
	if d := lim.Take(ctx, "a"); d.Allowed {
		t.Fatalf("4 s after settling at 50: %+v; want still refused", d)
	}
	clock.Advance(100 * time.Millisecond)
	if d := lim.Take(ctx, "a"); !d.Allowed {
		t.Fatalf("4.1 s after settling at 50: %+v; want allowed", d)
	}
}

// A bucket admits no request before its turn, beyond the rounding's
// allowance (a ten-thousandth of an interval and a microsecond): at one
// an hour, the second comes an hour after the first, not a moment sooner.
func TestTokenBucketNoUnitEarly(t *testing.T) {
	clock := newFakeClock()
	lim := newLimiter(Options{Limit: 1, Window: time.Hour, Algorithm: TokenBucket, Counter: newMemoryCounter(clock.Now)}, clock.Now)
	ctx := context.Background()
	if d := lim.Take(ctx, "a"); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	clock.Advance(time.Hour - time.Second)
	if d := lim.Take(ctx, "a"); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("a second before its turn: %+v; want refused, RetryAfter 1 s", d)
	}
	clock.Advance(time.Second)
	if d := lim.Take(ctx, "a"); !d.Allowed {
		t.Fatalf("at its turn: %+v; want allowed", d)
	}
}

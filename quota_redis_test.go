package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// Quotas on Redis: a tenant's limits in one hash, what a refused connection
// or a key of another type does, and the fallback while the counter fails.

// While the counter fails, the fallback decides the quotas too, in the
// proportion of FallbackLimit to Limit.
func TestQuotasFallbackInProportion(t *testing.T) {
	clock := newFakeClock()
	lim := newLimiter(Options{Counter: NewRedisCounter(redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t)})),
		Fallback: newMemoryCounter(clock.Now), Limit: 10, FallbackLimit: 5, Window: time.Minute,
		Quotas: dayAndMonth(1000, 4), Logger: newLogRecorder().logger()}, clock.Now)
	for range 2 {
		if d := lim.Take(context.Background(), "acme"); !d.Allowed || d.By != ByFallback {
			t.Fatalf("%+v; want allowed by the fallback", d)
		}
	}
	d := lim.Take(context.Background(), "acme")
	h := http.Header{}
	d.SetHeaders(h)
	if d.Allowed || d.By != ByFallback || d.Policy != "month" || d.Limit != 2 ||
		!strings.Contains(h.Get(hPolicy), `"default";q=5;w=60, "day";q=500;w=86400, "month";q=2;`) {
		t.Errorf("%+v (%s), policy %q; want refused by the fallback's month of 2", d, d.Policy, h.Get(hPolicy))
	}
}

// On Redis, a tenant's limits are one hash in its main key's hash slot,
// which expires when its last window or period ends (here the month's, on
// the server's clock), and Usage changes nothing in it.
func TestQuotaKeysOnRedis(t *testing.T) {
	for _, c := range redisClients {
		t.Run(c.name, func(t *testing.T) {
			rdb := c.client(t)
			ctx := context.Background()
			lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Name: "api", Limit: 5, Window: time.Minute,
				Quotas: dayAndMonth(10, 100)})
			tenant := uniqueTenant(t)
			takeExpect(t, lim, tenant, true, "")
			takeExpect(t, lim, tenant, true, "")
			main := "rl:api#" + tenant
			key := "{" + main + "}"
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			dayStart, _ := CalendarDay.Period(now)
			monthStart, monthEnd := CalendarMonth.Period(now)
			h, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			ms := func(tm time.Time) string { return strconv.FormatInt(tm.UnixMilli(), 10) }
			for f, want := range map[string]string{"api": "2", "day": "2", "month": "2", "day:s": ms(dayStart), "month:s": ms(monthStart), "e": ms(monthEnd)} {
				if h[f] != want {
					t.Errorf("HGET %s %s = %q, want %q (%v)", key, f, h[f], want, h)
				}
			}
			if end, err := strconv.ParseInt(h["api:s"], 10, 64); err != nil || time.UnixMilli(end).Sub(now) > time.Minute+time.Second || time.UnixMilli(end).Sub(now) < 58*time.Second {
				t.Errorf("the main window ends at %q, want a minute from now", h["api:s"])
			}
			if ttl, want := rdb.PTTL(ctx, key).Val(), monthEnd.Sub(now); ttl > want+time.Second || ttl < want-2*time.Second {
				t.Errorf("%s expires in %v, want at the month's end, in %v", key, ttl, want)
			}
			if n := rdb.Exists(ctx, main).Val(); n != 0 {
				t.Errorf("%s exists: a limiter with quotas keeps its main count in %s", main, key)
			}
			if cl, ok := rdb.(*redis.ClusterClient); ok {
				if a, b := cl.ClusterKeySlot(ctx, key).Val(), cl.ClusterKeySlot(ctx, main).Val(); a != b {
					t.Errorf("%s in slot %d, %s in %d", key, a, main, b)
				}
			}
			expectUsed(t, lim, tenant, 2, 2, 2)
			if after := rdb.HGetAll(ctx, key).Val(); fmt.Sprint(after) != fmt.Sprint(h) {
				t.Errorf("after Usage %v, want %v", after, h)
			}
			if err := lim.Reset(ctx, tenant); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("%s left after Reset", key)
			}
		})
	}
}

// Usage and Reset on a server that refuses connections fail at once, with
// the dial's error.
func TestUsageNamesARefusedConnection(t *testing.T) {
	lim := NewLimiter(Options{Counter: NewRedisCounter(redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t)})),
		Limit: 1, Window: time.Minute, Quotas: dayAndMonth(10, 100)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := lim.Usage(ctx, "acme")
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
		t.Errorf("Usage: %v after %v; want the refused connection, at once", err, time.Since(start))
	}
	if err := lim.Reset(ctx, "acme"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Reset: %v; want the refused connection", err)
	}
}

// A tenant's hash that holds something else fails that tenant alone, as
// the server's answer about one key: the others are decided, and no
// breaker opens.
func TestQuotaHashThatIsNotAHash(t *testing.T) {
	rdb := newRedisClient(t)
	ctx := context.Background()
	rec := newLogRecorder()
	lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 5, Window: time.Minute, Quotas: dayAndMonth(10, 100),
		Logger: rec.logger(), BreakerFailures: 1})
	bad, good := uniqueTenant(t), uniqueTenant(t)
	if err := rdb.Set(ctx, "{rl:"+bad+"}", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d := lim.Take(ctx, bad); d.By != ByNone || !strings.Contains(fmt.Sprint(d.Err), "something other than") {
			t.Fatalf("a tenant whose hash is a string: %+v; want decided without the counter, the key named", d)
		}
	}
	takeExpect(t, lim, good, true, "")
	if _, err := lim.Usage(ctx, bad); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Usage: %v; want the server's WRONGTYPE", err)
	}
	if lines := rec.withMsg("ratelimit: circuit breaker open"); len(lines) != 0 {
		t.Errorf("the breaker opened: %v", lines)
	}
}

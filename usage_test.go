package ratelimit

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Usage encodes to JSON as a gateway answers it: lower-case keys, and the
// window and reset in whole seconds, rounded up as the headers round them.
func TestUsageJSON(t *testing.T) {
	us := []Usage{
		{Name: "month", Limit: 100, Window: 31 * 24 * time.Hour, Used: 3, Remaining: 97, Reset: 14*24*time.Hour - 300*time.Millisecond},
		{Name: "default", Limit: 5, Window: 1500 * time.Millisecond, Remaining: 5},
	}
	month := `{"name":"month","limit":100,"used":3,"remaining":97,"window":2678400,"reset":1209600}`
	want := `[` + month + `,{"name":"default","limit":5,"used":0,"remaining":5,"window":2,"reset":0}]`
	if b, err := json.Marshal(us); err != nil || string(b) != want {
		t.Fatalf("json.Marshal(%+v) =\n%s (%v)\nwant\n%s", us, b, err, want)
	}
	if b, err := json.Marshal(&us[0]); err != nil || string(b) != month {
		t.Errorf("json.Marshal(&Usage) = %s (%v), want %s", b, err, month)
	}
}

// A limit with nothing counted reports Reset 0, not a window's length: a
// tenant never seen, and one whose only request was given back. Its
// window is its whole length.
func TestUsageWithNothingCountedResetsAtZero(t *testing.T) {
	for _, c := range []struct {
		name   string
		quotas []Quota
	}{{"alone", nil}, {"with a quota", []Quota{{Name: "hour", Limit: 50, Window: time.Hour}}}} {
		t.Run(c.name, func(t *testing.T) {
			eachTakeSubject(t, Options{Limit: 3, Window: time.Minute, Quotas: c.quotas}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
				check := func(when string) {
					t.Helper()
					us, err := lim.Usage(context.Background(), tenant)
					if err != nil {
						t.Fatalf("Usage %s: %v", when, err)
					}
					for _, u := range us {
						if u.Used != 0 || u.Remaining != u.Limit || u.Reset != 0 || u.Window != time.Minute && u.Window != time.Hour {
							t.Errorf("Usage %s: %+v; want nothing used, Reset 0, the window's whole length", when, u)
						}
					}
				}
				check("of a tenant never seen")
				if err := lim.Release(context.Background(), takeExpect(t, lim, tenant, true, "")); err != nil {
					t.Fatal(err)
				}
				check("after its only request was given back")
			})
		})
	}
}

// Usage and GiveBack on a server that never answers give up at
// StoreTimeout, as a request does (the client's read timeout is seconds),
// and once the breaker opens they are refused at once. The bound has
// generous slack: what it tells apart is 50 ms from go-redis's 3 s.
func TestReadsGiveUpAtStoreTimeout(t *testing.T) {
	hole := startBlackHole(t)
	rdb := redis.NewClient(&redis.Options{Addr: hole.addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	const timeout = 50 * time.Millisecond
	lim := NewLimiter(Options{Limit: 5, Window: time.Minute, Counter: NewRedisCounter(rdb), StoreTimeout: timeout,
		BreakerFailures: 3, Logger: newLogRecorder().logger()})
	ctx := context.Background()
	for i := range 6 {
		start := time.Now()
		_, uerr := lim.Usage(ctx, "t")
		gerr := lim.GiveBack(ctx, "t", 1)
		if took := time.Since(start); uerr == nil || gerr == nil || took > 10*(2*timeout)+time.Second {
			t.Fatalf("call %d on a black hole: Usage %v, GiveBack %v, in %v; want two errors within StoreTimeout each", i+1, uerr, gerr, took)
		}
	}
}

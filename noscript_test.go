package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// noScriptUser adds to every server of rdb an ACL user who may run every
// command but the scripting ones, as some managed setups grant, and
// returns its name and password.
func noScriptUser(t *testing.T, rdb redis.UniversalClient) (user, password string) {
	t.Helper()
	rules := strings.Fields(redisstore.ACLNoScripts)
	if _, ok := rdb.(*redis.ClusterClient); ok {
		rules = append(rules, "+cluster|slots") // as docs/redis.md says
	}
	return aclUser(t, rdb, rules...)
}

// On a server that refuses scripts, the fixed window still counts, with a
// transaction, exactly: 600 requests at once through two replicas at a
// limit of 100 let 100 through. A sliding window, which needs the script,
// fails with the server's refusal, and is decided by the fail policy.
func TestServerWithoutScripting(t *testing.T) {
	for _, s := range userClients[:2] { // single node, cluster
		t.Run(s.name, func(t *testing.T) {
			admin := s.admin(t)
			user, password := noScriptUser(t, admin)
			ctx := context.Background()
			rec := newLogRecorder()
			tenant := uniqueTenant(t)

			const limit, requests = 100, 600
			a, b := NewRedisCounter(s.client(t, user, password)), NewRedisCounter(s.client(t, user, password))
			// 600 requests at once under -race on a busy machine can take
			// more than the default 1 s allowed before a first answer; this
			// test is about counting, not time.
			opts := Options{Limit: limit, Window: time.Minute, Logger: rec.logger(), StoreTimeout: time.Second}
			limiters := []*Limiter{}
			for _, c := range []*RedisCounter{a, b} {
				o := opts
				o.Counter = c
				limiters = append(limiters, NewLimiter(o))
			}
			counted, allowed := burstAtOnce(limiters, tenant, requests)
			if counted != requests || allowed != limit {
				t.Fatalf("%d of %d decided by the counter (or refused by its cache), %d allowed; want all, exactly %d allowed (log: %v)",
					counted, requests, allowed, limit, rec.lines())
			}
			if a.engine.ScriptRefusal() == nil {
				t.Fatal("the counter did not learn that the server refuses scripts")
			}
			n, err := admin.Get(ctx, tenantKey(tenant)).Int()
			ttl, _ := admin.PTTL(ctx, tenantKey(tenant)).Result()
			if err != nil || n < limit || n > requests || ttl <= 0 || ttl > time.Minute {
				t.Fatalf("GET = %d, %v, PTTL %v; want between %d and %d with the window's expiry: refused requests spend on this path", n, err, ttl, limit, requests)
			}

			sliding := opts
			sliding.Counter, sliding.Algorithm, sliding.Name = a, SlidingWindow, "sliding"
			d := NewLimiter(sliding).Take(ctx, tenant)
			if d.By != ByNone || !d.Allowed || d.Err == nil || !strings.Contains(d.Err.Error(), "NOPERM") ||
				!strings.Contains(d.Err.Error(), "scripts") {
				t.Fatalf("sliding window without scripts: %+v; want failed open, with the server's NOPERM", d)
			}
			bucket := opts
			bucket.Counter, bucket.Algorithm, bucket.Name = a, TokenBucket, "bucket"
			bl := NewLimiter(bucket)
			if d := bl.Take(ctx, tenant); d.By != ByNone || !d.Allowed || !strings.Contains(fmt.Sprint(d.Err), "NOPERM") {
				t.Fatalf("token bucket without scripts: %+v; want failed open, with the server's NOPERM", d)
			}
			if err := bl.Ping(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), redisstore.ACLBucket) {
				t.Fatalf("Ping of a token bucket without scripts: %v; want the server's refusal, with the permissions to grant", err)
			}
			withQuotas := opts
			withQuotas.Counter, withQuotas.Name = a, "quotas"
			withQuotas.Quotas = []Quota{{Name: "month", Limit: 10, Calendar: CalendarMonth}}
			if d := NewLimiter(withQuotas).Take(ctx, tenant); d.By != ByNone || !d.Allowed || !strings.Contains(fmt.Sprint(d.Err), "NOPERM") {
				t.Fatalf("quotas without scripts: %+v; want failed open, with the server's NOPERM", d)
			}
			lines := rec.withMsg("ratelimit: the counter is misconfigured")
			if len(lines) == 0 || !strings.Contains(lines[len(lines)-1].str("err"), "NOPERM") ||
				!strings.Contains(lines[len(lines)-1].str("fix"), redisstore.ACLSliding) {
				t.Fatalf("log %v; want the refusal logged as misconfiguration, with what to fix", rec.lines())
			}
			// The switch to transactions is said once, at warning level,
			// with why and what it changes, by each limiter that counts so.
			switched := rec.withMsg("ratelimit: the server refuses scripts, so fixed windows count by MULTI/EXEC")
			if len(switched) != 2 || switched[0].level != slog.LevelWarn || !strings.Contains(switched[0].str("err"), "NOPERM") ||
				!strings.Contains(switched[0].msg, "cost stays counted") || !strings.Contains(switched[0].str("fix"), redisstore.ACLFixed) {
				t.Fatalf("log %v; want one warning from each of the two fixed-window limiters, with the refusal, what changes and the fix", rec.lines())
			}
		})
	}
}

// On a server that refuses scripts, a key that holds something else (here
// a list) is an answer about that key, as it is on the script's path: its
// tenant's requests are logged and counted as a misconfiguration, and the
// breaker stays closed, so the other tenants are still counted.
func TestServerWithoutScriptingKeyOfAnotherType(t *testing.T) {
	admin := newRedisClient(t)
	user, password := noScriptUser(t, admin)
	rdb := userClients[0].client(t, user, password) // a single node
	ctx := context.Background()
	listed, other := uniqueTenant(t)+":listed", uniqueTenant(t)+":other"
	if err := admin.RPush(ctx, tenantKey(listed), "not a count").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Del(ctx, tenantKey(listed), tenantKey(other)) })
	rec := newLogRecorder()
	m := &Metrics{}
	lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 10, Window: time.Minute, BreakerFailures: 2,
		Logger: rec.logger(), Metrics: m})
	const tries = 5
	for i := range tries {
		d := lim.Take(ctx, listed)
		if d.By != ByNone || !d.Allowed || d.Err == nil || !strings.Contains(d.Err.Error(), "WRONGTYPE") {
			t.Fatalf("request %d of the tenant whose key holds a list: %+v; want failed open, with the server's WRONGTYPE", i+1, d)
		}
	}
	if d := lim.Take(ctx, other); d.By != ByCounter || !d.Allowed {
		t.Fatalf("another tenant after %d WRONGTYPE answers: %+v; want decided by the counter, the breaker closed", tries, d)
	}
	if s := m.Snapshot(); s.StoreErrors.Configuration != tries || s.Breaker != "closed" {
		t.Fatalf("metrics: store errors %v, breaker %v; want %d of cause configuration, closed", s.StoreErrors, s.Breaker, tries)
	}
	lines := rec.withMsg("ratelimit: the counter is misconfigured")
	if len(lines) == 0 || !strings.Contains(lines[0].str("fix"), "Name") || len(rec.withMsg("ratelimit: circuit breaker")) != 0 {
		t.Fatalf("log %v; want the key logged as a misconfiguration, with its fix, and no breaker line", rec.lines())
	}
}

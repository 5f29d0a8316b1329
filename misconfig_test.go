package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A misconfigured Redis is not an outage: Ping reports it at start-up in
// the server's own words, with what to fix, and at request time the
// limiter logs it as a configuration error and counts it apart, while the
// request is decided as for any failure (here, failing open).
func TestMisconfiguredRedis(t *testing.T) {
	srv := startChaosRedis(t, 0)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	// The admin's connection stays authenticated after the password is set.
	if err := admin.ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "acl", "setuser", "otherkeys", "on", ">pw", "+@all", "~other:*").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, "rl:hashed", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		opt    redis.Options
		tenant string
		words  string // the server's, in Ping's error and the log
		fix    string // a word of what to fix
	}{
		{"no password", redis.Options{}, "acme", "NOAUTH", "Password"},
		{"wrong password", redis.Options{Password: "wrong"}, "acme", "WRONGPASS", "Password"},
		{"unknown database", redis.Options{Password: "secret", DB: 99}, "acme", "DB index is out of range", "databases"},
		{"keys not granted", redis.Options{Username: "otherkeys", Password: "pw"}, "acme", "NOPERM", "~rl:*"},
		{"a key that is not a count", redis.Options{Password: "secret"}, "hashed", "other than a count", "Name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opt := tt.opt
			opt.Addr = srv.Addr()
			rdb := redis.NewClient(&opt)
			t.Cleanup(func() { rdb.Close() })
			rec := newLogRecorder()
			m := &Metrics{}
			lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 10, Window: time.Minute, Logger: rec.logger(), Metrics: m})
			if tt.tenant == "acme" {
				err := lim.Ping(ctx)
				if err == nil || !strings.Contains(err.Error(), tt.words) || !strings.Contains(err.Error(), tt.fix) {
					t.Fatalf("Ping = %v; want the server's %q and what to fix (%q)", err, tt.words, tt.fix)
				}
			}
			d := lim.Take(ctx, tt.tenant)
			if d.By != ByNone || !d.Allowed || d.Err == nil || !strings.Contains(d.Err.Error(), tt.words) {
				t.Fatalf("Take: %+v; want failed open, with the server's %q", d, tt.words)
			}
			lines := rec.withMsg("ratelimit: the counter is misconfigured")
			if len(lines) != 1 || !strings.Contains(lines[0].str("fix"), tt.fix) || !strings.Contains(lines[0].str("err"), tt.words) {
				t.Fatalf("log %v; want one line saying the counter is misconfigured, what to fix and the server's words", rec.lines())
			}
			if s := m.Snapshot(); s.StoreErrors[CauseConfiguration] != 1 || s.FailedOpen != 1 {
				t.Fatalf("metrics %+v; want one configuration error, one failed open", s)
			}
		})
	}
}

// Ping passes on a store that works, in either algorithm, on every kind of
// client; a MemoryCounter passes until it is closed.
func TestPing(t *testing.T) {
	ctx := context.Background()
	for _, c := range redisClients {
		for _, algo := range algorithms {
			t.Run(c.name+"/"+algo.String(), func(t *testing.T) {
				lim := NewLimiter(Options{Counter: NewRedisCounter(c.client(t)), Name: "ping", Limit: 10, Window: time.Minute, Algorithm: algo})
				if err := lim.Ping(ctx); err != nil {
					t.Fatalf("Ping = %v, want nil", err)
				}
			})
		}
	}
	m := NewMemoryCounter()
	lim := NewLimiter(Options{Counter: m, Limit: 1, Window: time.Second})
	if err := lim.Ping(ctx); err != nil {
		t.Fatalf("Ping on memory = %v", err)
	}
	m.Close()
	if err := lim.Ping(ctx); err == nil {
		t.Fatal("Ping on a closed MemoryCounter = nil, want ErrClosed")
	}
}

// Ping tells a sliding window that the server refuses scripts.
func TestPingWithoutScripting(t *testing.T) {
	admin := newRedisClient(t)
	user, password := noScriptUser(t, admin)
	opt := redisOptions(t)
	opt.Username, opt.Password = user, password
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	c := NewRedisCounter(rdb)
	if err := NewLimiter(Options{Counter: c, Limit: 10, Window: time.Minute}).Ping(context.Background()); err != nil {
		t.Fatalf("a fixed window without scripts: Ping = %v, want nil: it counts by transactions", err)
	}
	err := NewLimiter(Options{Counter: c, Name: "sliding", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow}).Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "+@scripting") {
		t.Fatalf("a sliding window without scripts: Ping = %v; want the NOPERM and +@scripting", err)
	}
}

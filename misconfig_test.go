package ratelimit

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/redisstore"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// startPasswordedRedis starts a server of the test's own that wants the
// password "secret", and returns it with an admin client, whose
// connection stays authenticated after the password is set.
func startPasswordedRedis(t *testing.T) (*redistest.Server, *redis.Client) {
	srv := startChaosRedis(t, 0)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	if err := admin.ConfigSet(context.Background(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	return srv, admin
}

// A misconfigured Redis is not an outage: Ping reports it at start-up in
// the server's own words, with what to fix, and at request time the
// limiter logs it as a configuration error and counts it apart, while the
// request is decided as for any failure (here, failing open).
func TestMisconfiguredRedis(t *testing.T) {
	srv, admin := startPasswordedRedis(t)
	ctx := context.Background()
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
			if s := m.Snapshot(); s.StoreErrors.Configuration != 1 || s.FailedOpen != 1 {
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
		t.Fatal("Ping on a closed MemoryCounter = nil, want errClosed")
	}
}

// Ping tells a sliding window that the server refuses scripts.
func TestPingWithoutScripting(t *testing.T) {
	admin := newRedisClient(t)
	user, password := noScriptUser(t, admin)
	rdb := userClients[0].client(t, user, password) // a single node
	c := NewRedisCounter(rdb)
	rec := newLogRecorder()
	if err := NewLimiter(Options{Counter: c, Limit: 10, Window: time.Minute, Logger: rec.logger()}).Ping(context.Background()); err != nil {
		t.Fatalf("a fixed window without scripts: Ping = %v, want nil: it counts by transactions", err)
	}
	if lines := rec.withMsg("ratelimit: the server refuses scripts, so fixed windows count by MULTI/EXEC"); len(lines) != 1 || lines[0].level != slog.LevelWarn {
		t.Fatalf("log %v; want Ping to say, at warning level, that the fixed window counts by transactions", rec.lines())
	}
	err := NewLimiter(Options{Counter: c, Name: "sliding", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow}).Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), redisstore.ACLSliding) {
		t.Fatalf("a sliding window without scripts: Ping = %v; want the NOPERM and the permissions it needs", err)
	}
}

// The permissions docs/redis.md lists are exactly enough: a user with
// only those runs each algorithm, Ping included, on a single node, a
// cluster and a ring. A user with the fewer permissions that the docs once
// listed fails at start-up, and the error says it is a permission, with
// the ones to grant, not that a key holds something else.
func TestACLPermissionsTheDocsList(t *testing.T) {
	doc, err := os.ReadFile("docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	quotas := []Quota{{Name: "day", Limit: 10, Calendar: CalendarDay}, {Name: "minute", Limit: 10, Window: time.Minute}}
	cases := []struct {
		name   string
		algo   Algorithm
		quotas []Quota
		acl    string
	}{
		{"fixed window", FixedWindow, nil, redisstore.ACLFixed},
		{"sliding window", SlidingWindow, nil, redisstore.ACLSliding},
		{"fixed window with quotas", FixedWindow, quotas, redisstore.ACLQuotas},
		{"sliding window with quotas", SlidingWindow, quotas, redisstore.ACLQuotas},
		{"in flight", InFlight, nil, redisstore.ACLInFlight},
		{"token bucket", TokenBucket, nil, redisstore.ACLBucket},
		{"token bucket with quotas", TokenBucket, quotas, redisstore.ACLQuotas},
	}
	for _, c := range cases {
		if !strings.Contains(string(doc), c.acl) {
			t.Errorf("docs/redis.md does not list %q, the permissions of a %s", c.acl, c.name)
		}
	}
	ctx := context.Background()
	for _, s := range userClients {
		t.Run(s.name, func(t *testing.T) {
			admin := s.admin(t)
			extra := ""
			if s.name == "cluster" {
				extra = " +cluster|slots"
				if !strings.Contains(string(doc), strings.TrimSpace(extra)) {
					t.Errorf("docs/redis.md does not list %q, which a cluster client needs", extra)
				}
			}
			// On a server with functions, each line with +fcall
			// +function|load in place of +evalsha +eval runs every
			// algorithm too: by FCALL alone, since the user may run no
			// script.
			functions := admin.Do(ctx, "function", "list").Err() == nil
			if functions && !strings.Contains(string(doc), redisstore.ACLFunctions) {
				t.Errorf("docs/redis.md does not list %q, which calls the library", redisstore.ACLFunctions)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					tenant := uniqueTenant(t)
					opts := Options{Limit: 2, Window: time.Minute, Algorithm: c.algo, Quotas: c.quotas}
					runsAs(t, ctx, s, admin, c.name, c.acl+extra, opts, tenant)
					if functions {
						acl := strings.Replace(c.acl, "+evalsha +eval", redisstore.ACLFunctions, 1)
						runsAs(t, ctx, s, admin, c.name+" fcall", acl+extra, opts, tenant+"f")
					}

					// What the docs once listed: scripts, but not the
					// commands they run, which every server checks.
					user, password := aclUser(t, admin, strings.Fields("~rl:* ~{rl:* +evalsha +eval +ping"+extra)...)
					rec := newLogRecorder()
					lim := NewLimiter(Options{Counter: NewRedisCounter(s.client(t, user, password)), Limit: 2, Window: time.Minute, Algorithm: c.algo, Quotas: c.quotas, Logger: rec.logger()})
					err := lim.Ping(ctx)
					if err == nil || !strings.Contains(err.Error(), "the ACL user lacks a permission") || !strings.Contains(err.Error(), c.acl) ||
						!strings.Contains(err.Error(), redisstore.ACLFunctions) || strings.Contains(err.Error(), "other than a count") {
						t.Fatalf("Ping as a user without the scripts' commands: %v; want a missing permission, naming %q", err, c.acl)
					}
					if d := lim.Take(ctx, tenant); d.By != ByNone || len(rec.withMsg("ratelimit: the counter is misconfigured")) != 1 {
						t.Fatalf("Take: %+v, log %v; want decided without the counter and logged as a misconfiguration", d, rec.lines())
					}
				})
			}
		})
	}
}

// runsAs has a limiter of opts, named name, count tenant through a user
// with exactly the rules acl on s: Ping, two requests allowed and one
// refused, Usage, Reset, Release, all by the counter.
func runsAs(t *testing.T, ctx context.Context, s userClient, admin redis.UniversalClient, name, acl string, opts Options, tenant string) {
	t.Helper()
	user, password := aclUser(t, admin, strings.Fields(acl)...)
	// A name of its own: an InFlight case's probe key, a sorted set, may
	// still live when the next case pings.
	opts.Counter, opts.Name = NewRedisCounter(s.client(t, user, password)), strings.ReplaceAll(name, " ", "-")
	lim := NewLimiter(opts)
	if err := lim.Ping(ctx); err != nil {
		t.Fatalf("Ping as a user with %q: %v", acl, err)
	}
	for i, want := range []bool{true, true, false} {
		if d := lim.Take(ctx, tenant); d.By != ByCounter || d.Allowed != want {
			t.Fatalf("request %d as a user with %q: %+v; want decided by the counter, allowed %v", i+1, acl, d, want)
		}
	}
	if u, err := lim.Usage(ctx, tenant); err != nil || u[0].Used != 2 {
		t.Fatalf("Usage as a user with %q: %+v, %v; want 2 used", acl, u, err)
	}
	if err := lim.Reset(ctx, tenant); err != nil {
		t.Fatalf("Reset as a user with %q: %v", acl, err)
	}
	d := lim.Take(ctx, tenant)
	if !d.Allowed || d.By != ByCounter {
		t.Fatalf("after Reset as a user with %q: %+v; want allowed by the counter", acl, d)
	}
	if err := lim.Release(ctx, d); err != nil {
		t.Fatalf("Release as a user with %q: %v", acl, err)
	}
	if u, err := lim.Usage(ctx, tenant); err != nil || u[0].Used != 0 {
		t.Fatalf("Usage after Release as a user with %q: %+v, %v; want 0 used", acl, u, err)
	}
}

// A server out of memory that evicts nothing, and a read-only replica, are
// each a misconfiguration with its own fix, in the server's own words: at
// start-up (Ping) and at request time (the log, the metrics), in either
// algorithm. Neither is taken for a key that holds something else.
func TestMisconfiguredServerAnswers(t *testing.T) {
	ctx := context.Background()
	full := startChaosRedis(t, 0)
	fullAdmin := redis.NewClient(&redis.Options{Addr: full.Addr()})
	t.Cleanup(func() { fullAdmin.Close() })
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := fullAdmin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	primary := startChaosRedis(t, 0)
	replica := startChaosRedis(t, 0)
	replicaAdmin := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { replicaAdmin.Close() })
	host, port, _ := net.SplitHostPort(primary.Addr())
	if err := replicaAdmin.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, addr, words, fix string
	}{
		{"out of memory", full.Addr(), "OOM", "maxmemory"},
		{"read-only replica", replica.Addr(), "READONLY", "primary"},
	} {
		for _, algo := range algorithms {
			t.Run(tt.name+"/"+algo.String(), func(t *testing.T) {
				rdb := redis.NewClient(&redis.Options{Addr: tt.addr})
				t.Cleanup(func() { rdb.Close() })
				rec := newLogRecorder()
				m := &Metrics{}
				lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 10, Window: time.Minute, Algorithm: algo, Logger: rec.logger(), Metrics: m})
				err := lim.Ping(ctx)
				if err == nil || !strings.Contains(err.Error(), tt.words) || !strings.Contains(err.Error(), tt.fix) {
					t.Fatalf("Ping = %v; want the server's %q and what to fix (%q)", err, tt.words, tt.fix)
				}
				if d := lim.Take(ctx, "acme"); d.By != ByNone || !d.Allowed {
					t.Fatalf("Take: %+v; want failed open", d)
				}
				lines := rec.withMsg("ratelimit: the counter is misconfigured")
				if len(lines) != 1 || !strings.Contains(lines[0].str("err"), tt.words) || !strings.Contains(lines[0].str("fix"), tt.fix) {
					t.Fatalf("log %v; want one misconfiguration line with the server's words and the fix", rec.lines())
				}
				if s := m.Snapshot(); s.StoreErrors.Configuration != 1 {
					t.Fatalf("store errors %v; want one of cause configuration", s.StoreErrors)
				}
			})
		}
	}
}

// A plain client on one node of a cluster is a misconfiguration: Ping
// says so whatever node the probe key hashes to, and at request time the
// tenants whose keys live on other nodes are refused with MOVED, which is
// logged and counted as a misconfiguration, and does not open the breaker:
// the server answered, and the tenants of its own keys are still counted.
func TestPlainClientOnAClusterNode(t *testing.T) {
	ctx := context.Background()
	addrs := clusterAddrs(t)
	cluster := newClusterClient(t)
	rdb := redis.NewClient(&redis.Options{Addr: addrs[0]})
	t.Cleanup(func() { rdb.Close() })
	counter := NewRedisCounter(rdb)

	// Limiters whose probe keys hash to the connected node and to others.
	local, remote := 0, 0
	for i := 0; local == 0 || remote == 0; i++ {
		name := "node" + strconv.Itoa(i)
		var buf [maxKeyLen]byte
		probe := string(appendProbeKey(buf[:0], keyPrefix(name), FixedWindow))
		node, err := cluster.MasterForKey(ctx, probe)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == addrs[0] {
			local++
		} else {
			remote++
		}
		err = NewLimiter(Options{Counter: counter, Name: name, Limit: 10, Window: time.Minute}).Ping(ctx)
		if err == nil || !strings.Contains(err.Error(), "cluster mode") || !strings.Contains(err.Error(), "redis.NewClusterClient") {
			t.Fatalf("Ping of limiter %s (probe key on %s, the client on %s) = %v; want the server is a cluster node, use redis.NewClusterClient",
				name, node.Options().Addr, addrs[0], err)
		}
	}

	rec := newLogRecorder()
	m := &Metrics{}
	lim := NewLimiter(Options{Counter: counter, Name: uniqueTenant(t), Limit: 1000, Window: time.Minute, BreakerFailures: 2, Logger: rec.logger(), Metrics: m})
	var here, there string
	for i := 0; here == "" || there == ""; i++ {
		tenant := "t" + strconv.Itoa(i)
		var buf [maxKeyLen]byte
		node, err := cluster.MasterForKey(ctx, string(appendKey(buf[:0], lim.prefix, tenant, FixedWindow)))
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == addrs[0] {
			here = tenant
		} else {
			there = tenant
		}
	}
	for range 5 {
		if d := lim.Take(ctx, there); d.By != ByNone || !strings.Contains(d.Err.Error(), "MOVED") {
			t.Fatalf("a tenant of another node: %+v; want decided without the counter, for MOVED", d)
		}
	}
	if d := lim.Take(ctx, here); d.By != ByCounter {
		t.Fatalf("a tenant of the connected node after 5 MOVED answers: %+v; want decided by the counter, the breaker closed", d)
	}
	s := m.Snapshot()
	if s.StoreErrors.Configuration != 5 || s.Breaker != "closed" {
		t.Errorf("metrics: store errors %v, breaker %v; want 5 of cause configuration, closed", s.StoreErrors, s.Breaker)
	}
	lines := rec.withMsg("ratelimit: the counter is misconfigured")
	if len(lines) != 1 || !strings.Contains(lines[0].str("fix"), "redis.NewClusterClient") {
		t.Errorf("log %v; want one misconfiguration line saying to use redis.NewClusterClient", rec.lines())
	}
}

// A server that wants a password answers an unauthenticated client NOAUTH,
// and a call of more than 10 arguments (a batch of several keys, a tenant's
// quotas) "ERR Protocol error: unauthenticated multibulk length", closing
// the connection. Either is a misconfiguration with the password's fix, on
// every kind of call: logged and counted so, never as the store failing;
// Usage, which neither logs nor counts, answers it.
// The script calls are held back until 16 requests wait, each of its own
// limiter (so that each logs its line) on one counter, so that most of
// them share one call, which gets the protocol error.
func TestUnauthenticatedClient(t *testing.T) {
	srv, _ := startPasswordedRedis(t)
	ctx := context.Background()
	const requests = 16
	for _, kind := range []struct {
		name  string
		opts  Options
		usage bool
		big   bool // some calls have more than 10 arguments
	}{
		{"fixed window", Options{}, false, true},
		{"sliding window", Options{Algorithm: SlidingWindow}, false, true},
		{"quotas", Options{Quotas: []Quota{{Name: "day", Limit: 100, Calendar: CalendarDay}}}, false, true},
		{"in flight", Options{Algorithm: InFlight}, false, true},
		{"usage", Options{}, true, false}, // a read of one key, outside any batch
		{"usage with quotas", Options{Quotas: []Quota{{Name: "day", Limit: 100, Calendar: CalendarDay}}}, true, true},
	} {
		t.Run(kind.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			held := &heldScripts{release: make(chan struct{})}
			rdb.AddHook(held)
			counter := NewRedisCounter(rdb)
			rec := newLogRecorder()
			metrics := make([]*Metrics, requests)
			errs := make([]error, requests)
			var wg sync.WaitGroup
			for i := range requests {
				o := kind.opts
				o.Counter, o.Limit, o.Window, o.Logger, o.StoreTimeout = counter, 10, time.Minute, rec.logger(), 10*time.Second
				metrics[i] = &Metrics{}
				o.Metrics = metrics[i]
				lim := NewLimiter(o)
				tenant := "t" + strconv.Itoa(i)
				wg.Go(func() {
					if kind.usage {
						_, errs[i] = lim.Usage(ctx, tenant)
						return
					}
					errs[i] = lim.Take(ctx, tenant).Err
				})
			}
			time.Sleep(300 * time.Millisecond) // the requests reach the batcher
			close(held.release)
			wg.Wait()

			protocol := 0
			for i, err := range errs {
				if err == nil || !strings.Contains(fixOf(err), "Password") {
					t.Errorf("request %d: %v (fix %q); want a misconfiguration whose fix is the client's Password", i, err, fixOf(err))
				}
				if err != nil && strings.Contains(err.Error(), "unauthenticated multibulk length") {
					protocol++
				}
			}
			if kind.big && protocol == 0 {
				t.Fatalf("no request's call got the protocol error (%v); the test needs one call of more than 10 arguments", errs)
			}
			if kind.usage {
				return // Usage answers its error, and neither logs nor counts it
			}
			for i, m := range metrics {
				if s := m.Snapshot(); s.StoreErrors.Configuration != 1 || s.StoreErrors.Other != 0 {
					t.Errorf("request %d: store errors %v; want one of cause configuration", i, s.StoreErrors)
				}
			}
			lines := rec.withMsg("ratelimit: the counter is misconfigured")
			if len(lines) != requests || len(rec.withMsg("ratelimit: counter failed")) != 0 {
				t.Fatalf("log %v; want %d lines saying the counter is misconfigured, none that it failed", rec.lines(), requests)
			}
			for _, l := range lines {
				if !strings.Contains(l.str("fix"), "Password") {
					t.Errorf("line %v; want the fix to name the client's Password", l)
				}
			}
		})
	}
}

// heldScripts is a hook that holds every script call until release is
// closed.
type heldScripts struct{ release chan struct{} }

func (h *heldScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "fcall" || name == "evalsha" || name == "eval" {
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *heldScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		<-h.release
		return next(ctx, cmds)
	}
}

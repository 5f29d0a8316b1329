package envoyrls_test

import (
	"context"
	"github.com/gatewaykit/ratelimit/internal/testkit/syncbuf"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/envoyrls"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// A reload keeps every count: a rule's keys never name its limit, so a
// new limit applies to what its tenants have spent already; and a
// configuration that does not load leaves the running one deciding.

func TestLoadKeepsTheCounts(t *testing.T) {
	srv, c := newServer(t, envoyrls.Options{}, perMinute)
	expectCodes(t, ask(t, c, "api", desc("user", "jo")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "jo")), "OK OK")
	// From 3 a minute to 4: jo has spent 2 and has 2 left.
	load(t, srv, strings.Replace(perMinute, "requests_per_unit: 3", "requests_per_unit: 4", 1))
	resp := ask(t, c, "api", desc("user", "jo"))
	expectCodes(t, resp, "OK OK")
	if s := resp.Statuses[0]; s.LimitRemaining != 1 || s.GetCurrentLimit().GetRequestsPerUnit() != 4 {
		t.Fatalf("after the reload: %v, want the new limit of 4 with 1 left", s)
	}
	expectCodes(t, ask(t, c, "api", desc("user", "jo")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "jo")), "OVER_LIMIT OVER_LIMIT")
	// Down to 2: jo is past it, and stays refused.
	load(t, srv, strings.Replace(perMinute, "requests_per_unit: 3", "requests_per_unit: 2", 1))
	expectCodes(t, ask(t, c, "api", desc("user", "jo")), "OVER_LIMIT OVER_LIMIT")

	// A configuration that does not load changes nothing.
	bad, err := envoyrls.ParseConfig("bad.yaml", []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	if err == nil {
		err = srv.Load(bad)
	}
	if err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("a unit of fortnight: %v, want an error naming it", err)
	}
	expectCodes(t, ask(t, c, "api", desc("user", "jo")), "OVER_LIMIT OVER_LIMIT")
	expectCodes(t, ask(t, c, "api", desc("user", "kim")), "OK OK")
}

// The same on Redis, across two replicas: one reloads, both keep
// counting in the same keys.
func TestLoadKeepsTheCountsOnRedis(t *testing.T) {
	a, ca := newServer(t, envoyrls.Options{Store: redisStore(t), StoreTimeout: time.Second}, perMinute)
	_, cb := newServer(t, envoyrls.Options{Store: redisStore(t), StoreTimeout: time.Second}, perMinute)
	user := uniqueValue(t)
	expectCodes(t, ask(t, ca, "api", desc("user", user)), "OK OK")
	expectCodes(t, ask(t, cb, "api", desc("user", user)), "OK OK")
	load(t, a, strings.Replace(perMinute, "requests_per_unit: 3", "requests_per_unit: 4", 1))
	resp := ask(t, ca, "api", desc("user", user))
	if codesOf(resp) != "OK OK" || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the reloaded replica: %v, want OK with 1 of 4 left", resp)
	}
	expectCodes(t, ask(t, cb, "api", desc("user", user)), "OVER_LIMIT OVER_LIMIT") // 3 of its 3
}

// Watch reloads the file when it changes; a file that does not parse
// leaves the running configuration deciding, and the log says why.
func TestWatchReloadsTheFile(t *testing.T) {
	var log syncbuf.Buffer
	srv := envoyrls.NewServer(envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	t.Cleanup(func() { srv.Close() })
	path := writeFile(t, t.TempDir(), "rules.yaml", perMinute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Watch(ctx, path, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c := serve(t, srv)
	expectCodes(t, ask(t, c, "api", desc("plan", "free")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("plan", "free")), "OVER_LIMIT OVER_LIMIT")

	writeFile(t, t.TempDir(), "unused", "") // a write elsewhere changes nothing
	writeFile(t, path[:strings.LastIndex(path, "/")], "rules.yaml", strings.Replace(perMinute, "requests_per_unit: 1}", "requests_per_unit: 3}", 1))
	err := redistest.Poll(5*time.Second, func() error {
		if resp := ask(t, c, "api", hits(desc("plan", "free"), 0)); resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
			return errorf("not reloaded yet: %v", resp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expectCodes(t, ask(t, c, "api", desc("plan", "free")), "OK OK") // 2 of 3: the count kept
	expectCodes(t, ask(t, c, "api", desc("plan", "free")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("plan", "free")), "OVER_LIMIT OVER_LIMIT")

	writeFile(t, path[:strings.LastIndex(path, "/")], "rules.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limt: {}\n")
	err = redistest.Poll(5*time.Second, func() error {
		if !strings.Contains(log.String(), "does not load") {
			return errorf("no line about the bad file yet; log: %s", log.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "rate_limt") {
		t.Errorf("the log does not name the unknown field: %s", log.String())
	}
	// The same bad content is said once, however many times it is read.
	time.Sleep(20 * 10 * time.Millisecond)
	if n := strings.Count(log.String(), "does not load"); n != 1 {
		t.Errorf("the bad file was logged %d times in 20 intervals, want once: %s", n, log.String())
	}
	expectCodes(t, ask(t, c, "api", desc("plan", "free")), "OVER_LIMIT OVER_LIMIT")
	expectCodes(t, ask(t, c, "api", desc("user", "lee")), "OK OK")

	if err := envoyrls.NewServer(envoyrls.Options{}).Watch(ctx, path, time.Second); err == nil {
		t.Errorf("Watch of a file that does not load: nil error, want why")
	}
}

// A reload that turns a rule's shadow_mode or leases, with new limits,
// loads (a second Limiter of the rule's name, which the library must
// take beside the first) and keeps the count.
func TestLoadTurnsShadowAndLeases(t *testing.T) {
	srv, c := newServer(t, envoyrls.Options{Store: redisStore(t), StoreTimeout: 5 * time.Second}, perMinute)
	user := uniqueValue(t)
	expectCodes(t, ask(t, c, "api", desc("user", user)), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", user)), "OK OK")
	rule := "  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}"
	for _, tc := range []struct{ with, want string }{
		{"  - key: user\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 2, name: per-user}", "OK OK"},
		{"  - key: user\n    leases: true\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}", "OK OK"},
		{"  - key: user\n    leases: true\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}", "OVER_LIMIT OVER_LIMIT"},
	} {
		load(t, srv, strings.Replace(perMinute, rule, tc.with, 1))
		expectCodes(t, ask(t, c, "api", desc("user", user)), tc.want)
	}
}

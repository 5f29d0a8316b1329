package envoyrls_test

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/gatewaykit/ratelimit/envoyrls"
)

// The behaviours that the reference's README states of its configuration
// examples (testdata/config/example*.yaml), and the reference's
// end-to-end scripts (integration-test/scripts) on its example
// configuration, with each Envoy route's headers translated into the
// descriptors Envoy sends. A script's "ok" is an overall OK, its
// "limited" an overall OVER_LIMIT.
//
// Limits per second are spent with few calls (hits_addend), on a store
// whose clock stands still (shiftedStore): windows here start at a
// descriptor's first request, and a window of a second outlasts a
// machine that stalls.

// readmeServer serves the configuration files at paths, under
// testdata/config, on the in-memory store, its clock stopped: a window
// of a second lasts however long the machine takes between calls.
func readmeServer(t *testing.T, paths ...string) rlsv3.RateLimitServiceClient {
	t.Helper()
	srv := envoyrls.NewServer(envoyrls.Options{Store: newShiftedStore()})
	t.Cleanup(func() { srv.Close() })
	for i, p := range paths {
		paths[i] = filepath.Join("testdata/config", p)
	}
	loadFiles(t, srv, paths...)
	return serve(t, srv)
}

// askHits asks with the request's hits_addend n.
func askHits(t *testing.T, c rlsv3.RateLimitServiceClient, n uint32, domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := askErr(c, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: n, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// Example 1: each of database users and default has 500 a second; any
// other database has no limit.
func TestReadmeExample1(t *testing.T) {
	c := readmeServer(t, "example1.yaml")
	for _, db := range []string{"users", "default"} {
		expectResponse(t, askHits(t, c, 500, "mongo_cps", desc("database", db)),
			refResponse(refOK, refStatus(refOK, 500, refSecond, 0)))
		expectResponse(t, ask(t, c, "mongo_cps", desc("database", db)),
			refResponse(refOver, refStatus(refOver, 500, refSecond, 0)))
	}
	expectResponse(t, askHits(t, c, 1000, "mongo_cps", desc("database", "other")), refResponse(refOK, refBare(refOK)))
}

// Example 2: 5 marketing messages a day to a number, 100 messages a day
// to a number, each number counted apart, and both rules decided by one
// request of two descriptors.
func TestReadmeExample2(t *testing.T) {
	c := readmeServer(t, "example2.yaml")
	marketing := func(n string) *rlv3.RateLimitDescriptor { return desc("message_type", "marketing", "to_number", n) }
	for i := range 5 {
		expectResponse(t, ask(t, c, "messaging", marketing("2061111111"), desc("to_number", "2061111111")),
			refResponse(refOK, refStatus(refOK, 5, refDay, uint32(4-i)), refStatus(refOK, 100, refDay, uint32(99-i))))
	}
	// Differs from the reference: it counts the sixth call in the
	// to_number limit too (remaining 94); ours decides all or nothing, so
	// the refused call gives back what to_number took (remaining 95).
	resp := ask(t, c, "messaging", marketing("2061111111"), desc("to_number", "2061111111"))
	expectResponse(t, resp, refResponse(refOver, refStatus(refOver, 5, refDay, 0), refStatus(refOK, 100, refDay, 95)))
	// A DAY is the UTC calendar day: it resets at midnight UTC, on the
	// store's clock, which stands at quietHour.
	now := quietHour
	if d, until := resp.Statuses[0].GetDurationUntilReset().AsDuration(), now.Truncate(24*time.Hour).Add(24*time.Hour).Sub(now); d > until || d < until-time.Second {
		t.Errorf("duration_until_reset %v, want %v less at most a second: the time until midnight UTC on the store's clock", d, until)
	}

	// Another number has its own 5 marketing messages, and its own 100.
	expectResponse(t, askHits(t, c, 5, "messaging", marketing("2062222222")),
		refResponse(refOK, refStatus(refOK, 5, refDay, 0)))
	expectCodes(t, ask(t, c, "messaging", marketing("2062222222")), "OVER_LIMIT OVER_LIMIT")
	expectResponse(t, askHits(t, c, 100, "messaging", desc("to_number", "2062222222")),
		refResponse(refOK, refStatus(refOK, 100, refDay, 0)))
	expectCodes(t, ask(t, c, "messaging", desc("to_number", "2062222222")), "OVER_LIMIT OVER_LIMIT")
	// The first number has spent 5 of its 100.
	expectResponse(t, ask(t, c, "messaging", hits(desc("to_number", "2061111111"), 0)),
		refResponse(refOK, refStatus(refOK, 100, refDay, 95)))
}

// Example 3: each address has 10 a second; the blacklisted one, whose
// key and value match before the key alone, has 0: every request is
// refused.
func TestReadmeExample3(t *testing.T) {
	c := readmeServer(t, "example3.yaml")
	for range 3 {
		resp := ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
		expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
		if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 0 || l.GetUnit() != refSecond {
			t.Fatalf("the blacklisted address: current_limit %v, want 0 per SECOND", l)
		}
	}
	expectResponse(t, askHits(t, c, 9, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")),
		refResponse(refOK, refStatus(refOK, 10, refSecond, 1)))
	expectResponse(t, ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")),
		refResponse(refOK, refStatus(refOK, 10, refSecond, 0)))
	expectResponse(t, ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")),
		refResponse(refOver, refStatus(refOver, 10, refSecond, 0)))
	// Another address has its own 10.
	expectResponse(t, ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.2")),
		refResponse(refOK, refStatus(refOK, 10, refSecond, 9)))
}

// Example 4: a request of two entries does not match a configuration one
// level deep, and matches one two levels deep.
func TestReadmeExample4(t *testing.T) {
	two := desc("key", "value", "subkey", "subvalue")
	c := readmeServer(t, "example4.yaml")
	expectResponse(t, askHits(t, c, 1000, "example4", two), refResponse(refOK, refBare(refOK)))
	// Its one entry alone matches the first level.
	expectResponse(t, ask(t, c, "example4", desc("key", "value")), refResponse(refOK, refStatus(refOK, 300, refSecond, 299)))

	c = readmeServer(t, "example4b/example4.yaml")
	expectResponse(t, ask(t, c, "example4", two), refResponse(refOK, refStatus(refOK, 300, refSecond, 299)))
	// The first level has no limit of its own.
	expectResponse(t, ask(t, c, "example4", desc("key", "value")), refResponse(refOK, refBare(refOK)))
}

// Example 5: an unlimited descriptor is OK with MaxUint32 left and no
// limit, however much it asks; a limited one beside it is limited.
func TestReadmeExample5(t *testing.T) {
	c := readmeServer(t, "example5.yaml")
	unlimited := &rlsv3.RateLimitResponse_DescriptorStatus{Code: refOK, LimitRemaining: math.MaxUint32}
	for range 3 {
		expectResponse(t, askHits(t, c, math.MaxUint32, "internal", desc("ldap", "cn=admin")), refResponse(refOK, unlimited))
	}
	expectResponse(t, askHits(t, c, 100, "internal", desc("azure", "a")),
		refResponse(refOK, refStatus(refOK, 100, refMinute, 0)))
	expectResponse(t, ask(t, c, "internal", desc("azure", "a"), desc("ldap", "x")),
		refResponse(refOver, refStatus(refOver, 100, refMinute, 0), unlimited))
}

// Example 6: user-a, in shadow mode, is never limited, though its limit
// of 10 a second is counted; user-b is limited at 20 a second.
func TestReadmeExample6(t *testing.T) {
	c := readmeServer(t, "example6.yaml")
	userA := desc("service", "auth-service", "user", "user-a")
	expectResponse(t, askHits(t, c, 9, "example6", userA), refResponse(refOK, refStatus(refOK, 10, refSecond, 1)))
	expectResponse(t, ask(t, c, "example6", userA), refResponse(refOK, refStatus(refOK, 10, refSecond, 0)))
	for range 5 {
		// Over its limit, it is OK with nothing left, as the
		// reference's shadow_mode answers.
		expectResponse(t, ask(t, c, "example6", userA), refResponse(refOK, refStatus(refOK, 10, refSecond, 0)))
	}
	t.Run("a cost that crosses the limit at once", func(t *testing.T) {
		// The reference counts the whole cost (INCRBY 5: 14 > 10) and
		// answers a shadow descriptor over its limit OK with 0 left.
		userA := desc("service", "svc-"+uniqueValue(t), "user", "user-a")
		expectResponse(t, askHits(t, c, 9, "example6", userA), refResponse(refOK, refStatus(refOK, 10, refSecond, 1)))
		// Differs from the reference in the count only: the 5 that did
		// not fit are not counted (a shadow descriptor decides as it
		// would, then lets through), so 1 is still left for a cost of 1.
		resp := askHits(t, c, 5, "example6", userA)
		expectCodes(t, resp, "OK OK")
		if got := resp.Statuses[0].LimitRemaining; got != 0 {
			t.Fatalf("a shadow descriptor over its limit answers limit_remaining %d, want 0, as the reference: %v", got, resp)
		}
		expectResponse(t, askHits(t, c, 1, "example6", userA), refResponse(refOK, refStatus(refOK, 10, refSecond, 0)))
	})
	userB := desc("service", "auth-service", "user", "user-b")
	expectResponse(t, askHits(t, c, 20, "example6", userB), refResponse(refOK, refStatus(refOK, 20, refSecond, 0)))
	expectResponse(t, ask(t, c, "example6", userB), refResponse(refOver, refStatus(refOver, 20, refSecond, 0)))
}

// Example 7: (key_1, value_1), (user, bkthomps) has 5 a second and
// (key_2, value_2), (user, bkthomps) 10; sent together, the second
// replaces the first, which is not counted.
func TestReadmeExample7(t *testing.T) {
	c := readmeServer(t, "example7.yaml")
	first := func() *rlv3.RateLimitDescriptor { return desc("key_1", "value_1", "user", "bkthomps") }
	second := func() *rlv3.RateLimitDescriptor { return desc("key_2", "value_2", "user", "bkthomps") }
	specific := func(code rlsv3.RateLimitResponse_Code, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		st := refStatus(code, 5, refSecond, remaining)
		st.CurrentLimit.Name = "specific_limit"
		return st
	}

	// Together: 10 a second, the second's.
	expectResponse(t, ask(t, c, "example7", first(), second()),
		refResponse(refOK, refBare(refOK), refStatus(refOK, 10, refSecond, 9)))
	expectResponse(t, askHits(t, c, 9, "example7", first(), second()),
		refResponse(refOK, refBare(refOK), refStatus(refOK, 10, refSecond, 0)))
	expectResponse(t, ask(t, c, "example7", first(), second()),
		refResponse(refOver, refBare(refOK), refStatus(refOver, 10, refSecond, 0)))
	// The replaced limit was not counted: the first alone has its 5.
	expectResponse(t, askHits(t, c, 5, "example7", first()), refResponse(refOK, specific(refOK, 0)))
	expectResponse(t, ask(t, c, "example7", first()), refResponse(refOver, specific(refOver, 0)))
	// The second alone has spent its 10 together with the first.
	expectResponse(t, ask(t, c, "example7", second()), refResponse(refOver, refStatus(refOver, 10, refSecond, 0)))
}

// Example 9: a wildcard value matches every value it prefixes, each
// value counted apart.
func TestReadmeExample9(t *testing.T) {
	c := readmeServer(t, "example9.yaml")
	for _, v := range []string{"value_1", "value_2", "value"} {
		expectResponse(t, askHits(t, c, 20, "example9", desc("key1", v)),
			refResponse(refOK, refStatus(refOK, 20, refMinute, 0)))
		expectResponse(t, ask(t, c, "example9", desc("key1", v)),
			refResponse(refOver, refStatus(refOver, 20, refMinute, 0)))
	}
	expectResponse(t, askHits(t, c, 100, "example9", desc("key1", "other")), refResponse(refOK, refBare(refOK)))
	// Differs from the reference: it matches the wildcard against the
	// entry's "key_value" string, so that key1_value* also matches an
	// entry keyed "key1_value2" (its "key1_value2_x" starts with
	// "key1_value") and limits it at 20. Here an entry matches only the
	// descriptors of its own key: no limit.
	expectResponse(t, askHits(t, c, 100, "example9", desc("key1_value2", "x")), refResponse(refOK, refBare(refOK)))
}

// exampleYAML is the reference's examples/ratelimit/config/example.yaml,
// which its end-to-end tests run Envoy against.
const exampleYAML = `---
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
      - key: baz
        rate_limit:
          unit: second
          requests_per_unit: 1
      - key: baz
        value: not-so-shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: baz
        value: shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
        shadow_mode: true
      - key: bay
        rate_limit:
          unlimited: true
  - key: unspec
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: qux
    rate_limit:
      unlimited: true
`

// The descriptors that each route of the reference's
// examples/envoy/proxy.yaml sends, one list of header names each.
var (
	twoHeader  = [][]string{{"foo", "bar"}, {"foo", "baz"}}
	fourHeader = [][]string{{"foo", "bar"}, {"source_cluster", "destination_cluster"}}
	fiveHeader = [][]string{{"foo", "bar"}, {"source_cluster", "destination_cluster"}, {"category"}}
)

// route is what Envoy sends for a request of headers (name, value, …) to
// a route of actions: a descriptor for each action whose headers the
// request all has (Envoy drops the others), each header an entry.
func route(actions [][]string, headers ...string) []*rlv3.RateLimitDescriptor {
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	var ds []*rlv3.RateLimitDescriptor
next:
	for _, names := range actions {
		var kv []string
		for _, n := range names {
			v, ok := h[n]
			if !ok {
				continue next
			}
			kv = append(kv, n, v)
		}
		ds = append(ds, desc(kv...))
	}
	return ds
}

// curl sends Envoy's call for a request of headers to a route of
// actions, and checks its codes, overall then each descriptor's.
func curl(t *testing.T, c rlsv3.RateLimitServiceClient, want string, actions [][]string, headers ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	resp := ask(t, c, "rl", route(actions, headers...)...)
	expectCodes(t, resp, want)
	return resp
}

func exampleServer(t *testing.T) rlsv3.RateLimitServiceClient {
	t.Helper()
	_, c := newServer(t, envoyrls.Options{Store: newShiftedStore()}, exampleYAML)
	return c
}

// replaces.sh, step by step.
func TestReferenceE2EReplaces(t *testing.T) {
	c := exampleServer(t)
	banned := []string{"foo", "bkthomps", "bar", "banned"}
	// 1. (foo, bkthomps), (bar, banned): banned_limit, 0 a minute.
	curl(t, c, "OVER_LIMIT OVER_LIMIT", twoHeader, banned...)
	// 2. banned_limit still applies beside (proxy, mock).
	resp := curl(t, c, "OVER_LIMIT OVER_LIMIT OK", fourHeader, append(banned, "source_cluster", "proxy", "destination_cluster", "mock")...)
	// Differs from the reference: it counts (proxy, mock)'s 1 a minute
	// in this refused request (remaining 0); ours gives it back
	// (remaining 1), as a refused request spends nothing.
	if got := resp.Statuses[1].LimitRemaining; got != 1 {
		t.Errorf("(proxy, mock) in a refused request: %d left, want 1", got)
	}
	// 3. (proxy, override) replaces banned_limit, at 2 a minute.
	override := append(banned, "source_cluster", "proxy", "destination_cluster", "override")
	curl(t, c, "OK OK OK", fourHeader, override...)
	resp = curl(t, c, "OK OK OK", fourHeader, override...)
	if resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("the replaced banned_limit: %v, want no limit", resp.Statuses[0])
	}
	curl(t, c, "OVER_LIMIT OK OVER_LIMIT", fourHeader, override...)
	// 4. (proxy, bkthomps) replaces bkthomps, at 2 a minute.
	myFoo := []string{"foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy"}
	toBkthomps := append(myFoo[:6:6], "destination_cluster", "bkthomps")
	curl(t, c, "OK OK OK", fourHeader, toBkthomps...)
	curl(t, c, "OK OK OK", fourHeader, toBkthomps...)
	curl(t, c, "OVER_LIMIT OK OVER_LIMIT", fourHeader, toBkthomps...)
	// 5. (proxy, not_bkthomps) matches nothing, so bkthomps (1 a
	// minute) applies, which step 4 did not count.
	notBkthomps := append(myFoo[:6:6], "destination_cluster", "not_bkthomps")
	curl(t, c, "OK OK OK", fourHeader, notBkthomps...)
	curl(t, c, "OVER_LIMIT OVER_LIMIT OK", fourHeader, notBkthomps...)
	curl(t, c, "OVER_LIMIT OK OVER_LIMIT", fourHeader, toBkthomps...)
	// 6. (category, account) replaces bkthomps and fake_name, at 4 a
	// minute.
	five := append(myFoo[:6:6], "destination_cluster", "fake", "category", "account")
	for range 4 {
		curl(t, c, "OK OK OK OK", fiveHeader, five...)
	}
	curl(t, c, "OVER_LIMIT OK OK OVER_LIMIT", fiveHeader, five...)
	// 7. bkthomps counts each value of foo apart.
	curl(t, c, "OK OK", twoHeader, "foo", "foo_2", "bar", "bkthomps")
	curl(t, c, "OVER_LIMIT OVER_LIMIT", twoHeader, "foo", "foo_2", "bar", "bkthomps")
	// 8. (foo_3), (bar, bar_3) matches bar alone, 3 a minute; (proxy,
	// fake) is fake_name, 2 a minute.
	foo3 := []string{"foo", "foo_3", "bar", "bar_3", "source_cluster", "proxy", "destination_cluster", "fake"}
	curl(t, c, "OK OK OK", fourHeader, foo3...)
	curl(t, c, "OK OK OK", fourHeader, foo3...)
	resp = curl(t, c, "OVER_LIMIT OK OVER_LIMIT", fourHeader, foo3...)
	// Differs from the reference: it counts bar_3 in the refused third
	// request (remaining 0); ours gives it back (remaining 1).
	if got := resp.Statuses[0].LimitRemaining; got != 1 {
		t.Errorf("(foo_3), (bar, bar_3) in a refused request: %d left, want 1", got)
	}
	// 9. (category, account) has spent its 4.
	curl(t, c, "OVER_LIMIT OK OK OVER_LIMIT", fiveHeader, five...)
}

// trigger-ratelimit.sh: (foo, pelle), (baz, not-so-shady) has 3 a
// minute.
func TestReferenceE2ETriggerRatelimit(t *testing.T) {
	c := exampleServer(t)
	for i := range 3 {
		resp := curl(t, c, "OK OK", twoHeader, "foo", "pelle", "baz", "not-so-shady")
		if got := resp.Statuses[0].LimitRemaining; got != uint32(2-i) {
			t.Fatalf("call %d: %d left, want %d", i+1, got, 2-i)
		}
	}
	curl(t, c, "OVER_LIMIT OVER_LIMIT", twoHeader, "foo", "pelle", "baz", "not-so-shady")
	curl(t, c, "OVER_LIMIT OVER_LIMIT", twoHeader, "foo", "pelle", "baz", "not-so-shady")
}

// simple-get.sh: (foo, test), (baz, shady) is allowed.
func TestReferenceE2ESimpleGet(t *testing.T) {
	c := exampleServer(t)
	resp := curl(t, c, "OK OK", twoHeader, "foo", "test", "baz", "shady")
	if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 3 || l.GetUnit() != refMinute {
		t.Errorf("(foo, test), (baz, shady): current_limit %v, want 3 per MINUTE", l)
	}
}

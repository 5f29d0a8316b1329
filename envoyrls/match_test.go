package envoyrls

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
)

// entries makes a request descriptor's entries from keys and values in
// turn.
func entries(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry {
	es := make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// mustCompile parses and compiles data, failing the test on an error.
func mustCompile(t *testing.T, data string) *rules {
	t.Helper()
	rs, err := compile(mustParse(t, data))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return rs
}

// matchCase is a request and the rule (by path, "" for none) and tenant
// it should match.
type matchCase struct {
	domain string
	kv     []string
	path   string
	tenant string
}

// checkMatches runs cases against rs.
func checkMatches(t *testing.T, rs *rules, cases []matchCase) {
	t.Helper()
	for _, c := range cases {
		r, tenant := rs.match(c.domain, entries(c.kv...))
		path := ""
		if r != nil {
			path = r.path
		}
		if path != c.path || tenant != c.tenant {
			t.Errorf("match(%s, %q) = %q, tenant %q; want %q, tenant %q", c.domain, c.kv, path, tenant, c.path, c.tenant)
		}
	}
}

func TestMatchReadmeExamples(t *testing.T) {
	_, rs := mustLoad(t, "testdata/config")
	checkMatches(t, rs, []matchCase{
		// Example 1.
		{"mongo_cps", []string{"database", "users"}, "mongo_cps.database_users", ""},
		{"mongo_cps", []string{"database", "other"}, "", ""},
		// Example 2: each number of a marketing message counts apart,
		// and so does each number overall.
		{"messaging", []string{"message_type", "marketing", "to_number", "2061111111"}, "messaging.message_type_marketing.to_number", "2061111111"},
		{"messaging", []string{"message_type", "marketing", "to_number", "2062222222"}, "messaging.message_type_marketing.to_number", "2062222222"},
		{"messaging", []string{"to_number", "2061111111"}, "messaging.to_number", "2061111111"},
		{"messaging", []string{"message_type", "marketing"}, "", ""}, // a placeholder
		{"messaging", []string{"message_type", "transactional", "to_number", "1"}, "", ""},
		// Example 3: key and value before the key alone.
		{"edge_proxy_per_ip", []string{"remote_address", "50.0.0.1"}, "edge_proxy_per_ip.remote_address", "50.0.0.1"},
		{"edge_proxy_per_ip", []string{"remote_address", "50.0.0.5"}, "edge_proxy_per_ip.remote_address_50.0.0.5", ""},
		// Example 4: a request deeper than the tree matches nothing.
		{"example4", []string{"key", "value", "subkey", "subvalue"}, "", ""},
		{"example4", []string{"key", "value"}, "example4.key_value", ""},
		// Example 5.
		{"internal", []string{"ldap", "x"}, "internal.ldap", "x"},
		{"internal", []string{"azure", "y"}, "internal.azure", "y"},
		// Example 6.
		{"example6", []string{"service", "auth-service", "user", "user-a"}, "example6.service.user_user-a", "auth-service"},
		{"example6", []string{"service", "auth-service", "user", "user-c"}, "", ""},
		// Example 7.
		{"example7", []string{"key_1", "value_1", "user", "bkthomps"}, "example7.key_1_value_1.user_bkthomps", ""},
		{"example7", []string{"key_2", "value_2", "user", "bkthomps"}, "example7.key_2_value_2.user_bkthomps", ""},
		// Example 8.
		{"example8", []string{"key1", "unspecified_value"}, "example8.key1", "unspecified_value"},
		{"example8", []string{"key1", "value1"}, "example8.key1_value1", ""},
		// Example 9: a wildcard, each value apart.
		{"example9", []string{"key1", "value_1"}, "example9.key1_value*", "value_1"},
		{"example9", []string{"key1", "value_2"}, "example9.key1_value*", "value_2"},
		{"example9", []string{"key1", "valu"}, "", ""},
		{"example9", []string{"key2", "value_1"}, "", ""},
		// Example 10.
		{"example10", []string{"route", "api", "http_method", "GET", "subject_id", "123"}, "example10.route.http_method.subject_id", "api/GET/123"},
		{"example10_wildcard", []string{"user", "alice", "action", "readfile", "resource", "documents"}, "example10_wildcard.user.action_read*.resource", "alice/readfile/documents"},
		// Example 11: share_threshold gives every file one tenant.
		{"example11", []string{"files", "files/a.pdf"}, "example11.files_files/*", ""},
		{"example11", []string{"files", "files/b.csv"}, "example11.files_files/*", ""},
		{"example11", []string{"files_no_share", "files_no_share/a.pdf"}, "example11.files_no_share_files_no_share/*", "files_no_share%2Fa.pdf"},
		{"example11", []string{"files_no_share", "files_no_share/b.csv"}, "example11.files_no_share_files_no_share/*", "files_no_share%2Fb.csv"},
		{"example11_metrics", []string{"route", "api/v1", "method", "GET"}, "example11_metrics.route_api/*.method", "GET"},
		{"example11_metrics", []string{"route", "api/v2", "method", "GET"}, "example11_metrics.route_api/*.method", "GET"},
		// An unknown domain.
		{"nowhere", []string{"database", "users"}, "", ""},
	})
	if rs.has("nowhere") || !rs.has("messaging") {
		t.Errorf("has(nowhere) = %v, has(messaging) = %v", rs.has("nowhere"), rs.has("messaging"))
	}
}

func TestMatchReadmeRuleFields(t *testing.T) {
	_, rs := mustLoad(t, "testdata/config")
	by := make(map[string]*rule)
	rs.each(func(r *rule) { by[r.path] = r })

	// Example 5: unlimited has no limits.
	if r := by["internal.ldap"]; !r.unlimited || r.limits != nil {
		t.Errorf("ldap = %+v", r)
	}
	want := []limit{{unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, perUnit: 100}}
	if r := by["internal.azure"]; r.unlimited || !reflect.DeepEqual(r.limits, want) {
		t.Errorf("azure = %+v", r)
	}
	// Example 6: shadow_mode.
	if a, b := by["example6.service.user_user-a"], by["example6.service.user_user-b"]; !a.shadow || b.shadow {
		t.Errorf("shadow = %v, %v", a.shadow, b.shadow)
	}
	// Example 7: names and replaces.
	r1, r2 := by["example7.key_1_value_1.user_bkthomps"], by["example7.key_2_value_2.user_bkthomps"]
	if r1.limitName != "specific_limit" || r1.replaces != nil || r2.limitName != "" ||
		!reflect.DeepEqual(r2.replaces, []string{"specific_limit"}) {
		t.Errorf("example 7: %+v, %+v", r1, r2)
	}
	// Example 3: requests_per_unit 0.
	if r := by["edge_proxy_per_ip.remote_address_50.0.0.5"]; len(r.limits) != 1 || r.limits[0].perUnit != 0 {
		t.Errorf("blacklist = %+v", r)
	}
	// Every name is the path, short and plain as they are.
	for p, r := range by {
		if r.name != p {
			t.Errorf("rule %s named %q", p, r.name)
		}
	}
}

func TestMatchIntegration(t *testing.T) {
	_, rs := mustLoad(t, "testdata/config/integration")
	checkMatches(t, rs, []matchCase{
		{"foo", []string{"hello", "world"}, "", ""},
		{"basic", []string{"key1", "foo"}, "basic.key1", "foo"},
		{"another", []string{"key2", "12345"}, "another.key2", "12345"},
		{"another", []string{"key3", "12345"}, "another.key3", "12345"},
		{"another", []string{"key4", "durTest"}, "another.key4", "durTest"},
		{"reload", []string{"block", "foo"}, "reload.block", "foo"},
		{"share-threshold-test", []string{"files", "files/a.pdf"}, "share-threshold-test.files_files/*", ""},
		{"share-threshold-test", []string{"files", "files/b.csv"}, "share-threshold-test.files_files/*", ""},
		{"share-threshold-test", []string{"files_no_share", "files_no_share/x1"}, "share-threshold-test.files_no_share_files_no_share/*", "files_no_share%2Fx1"},
	})
}

func TestMatchPrecedence(t *testing.T) {
	rs := mustCompile(t, `domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "ab*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: abc
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: all
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: x
    value: "y*"
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: x_y
    rate_limit: {unit: second, requests_per_unit: 7}
`)
	checkMatches(t, rs, []matchCase{
		{"d", []string{"k", "abc"}, "d.k_abc", ""},        // exact first
		{"d", []string{"k", "abd"}, "d.k_ab*", "abd"},     // then the first wildcard in order
		{"d", []string{"k", "ab"}, "d.k_ab*", "ab"},       // a prefix that is the whole value
		{"d", []string{"k", "az"}, "d.k_a*", "az"},        // a later wildcard
		{"d", []string{"k", "b"}, "d.k", "b"},             // then the key alone
		{"d", []string{"k", ""}, "d.k", ""},               // an empty value
		{"d", []string{"k", "a*"}, "d.k_a*", "a*"},        // the pattern itself, exactly
		{"d", []string{"all", ""}, "d.all_*", ""},         // "*" matches an empty value
		{"d", []string{"all", "q/r"}, "d.all_*", "q%2Fr"}, // and any other
		{"d", []string{"x", "yz"}, "d.x_y*", "yz"},
		// Only the entry's own key: the reference's joined "x_y" + "_z"
		// would match "x_y*" too; here the key alone "x_y" matches.
		{"d", []string{"x_y", "z"}, "d.x_y", "z"},
		// Nor does key "x" reach descriptor "x_y" by value "y": the
		// wildcard "x_y*" matches it first anyway.
		{"d", []string{"x", "y"}, "d.x_y*", "y"},
	})
	// The wildcard listed first wins, whichever is longer.
	rs = mustCompile(t, `domain: d
descriptors:
  - key: k
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: "ab*"
    rate_limit: {unit: second, requests_per_unit: 2}
`)
	checkMatches(t, rs, []matchCase{{"d", []string{"k", "abc"}, "d.k_a*", "abc"}})
}

func TestMatchDepth(t *testing.T) {
	rs := mustCompile(t, `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        descriptors:
          - key: c
            value: "v"
            rate_limit: {unit: second, requests_per_unit: 2}
  - key: open
  - key: top
    value: t
    descriptors:
      - key: leaf
        value: l
`)
	checkMatches(t, rs, []matchCase{
		{"d", []string{"a", "1"}, "d.a", "1"},                             // fewer entries: the node's own rule
		{"d", []string{"a", "1", "b", "2"}, "", ""},                       // a node without rate_limit
		{"d", []string{"a", "1", "b", "2", "c", "v"}, "d.a.b.c_v", "1/2"}, // the leaf
		{"d", []string{"a", "1", "b", "2", "c", "w"}, "", ""},             // no match at the last level
		{"d", []string{"a", "1", "b", "2", "c", "v", "e", "f"}, "", ""},   // deeper than the tree
		{"d", []string{"a", "1", "z", "2"}, "", ""},                       // no match in the middle
		{"d", []string{"open", "x"}, "", ""},                              // neither rate_limit nor children
		{"d", []string{"open", "x", "more", "y"}, "", ""},
		{"d", []string{"top", "t", "leaf", "l"}, "", ""},
		{"d", nil, "", ""}, // no entries
	})
}

func TestMatchTenant(t *testing.T) {
	rs := mustCompile(t, `domain: d
descriptors:
  - key: org
    descriptors:
      - key: plan
        value: gold
        descriptors:
          - key: path
            value: "/api/*"
            descriptors:
              - key: user
                rate_limit: {unit: minute, requests_per_unit: 1}
          - key: shared
            value: "s*"
            share_threshold: true
            descriptors:
              - key: user
                rate_limit: {unit: minute, requests_per_unit: 1}
`)
	checkMatches(t, rs, []matchCase{
		{"d", []string{"org", "acme", "plan", "gold", "path", "/api/v1", "user", "bob"},
			"d.org.plan_gold.path_/api/*.user", "acme/%2Fapi%2Fv1/bob"},
		// '/' and '%' are escaped, so that values cannot run into each
		// other.
		{"d", []string{"org", "a/b", "plan", "gold", "path", "/api/", "user", "c"},
			"d.org.plan_gold.path_/api/*.user", "a%2Fb/%2Fapi%2F/c"},
		{"d", []string{"org", "a", "plan", "gold", "path", "/api/", "user", "b/c"},
			"d.org.plan_gold.path_/api/*.user", "a/%2Fapi%2F/b%2Fc"},
		{"d", []string{"org", "100%", "plan", "gold", "path", "/api/%2F", "user", ""},
			"d.org.plan_gold.path_/api/*.user", "100%25/%2Fapi%2F%252F/"},
		// A shared wildcard names no value.
		{"d", []string{"org", "acme", "plan", "gold", "shared", "s1", "user", "bob"},
			"d.org.plan_gold.shared_s*.user", "acme/bob"},
		{"d", []string{"org", "acme", "plan", "gold", "shared", "s2", "user", "bob"},
			"d.org.plan_gold.shared_s*.user", "acme/bob"},
	})
}

func TestMatchAllocs(t *testing.T) {
	_, rs := mustLoad(t, "testdata/config")
	cases := []struct {
		domain string
		kv     []string
		allocs float64
	}{
		{"example7", []string{"key_2", "value_2", "user", "bkthomps"}, 0}, // exact
		{"messaging", []string{"message_type", "marketing", "to_number", "2061111111"}, 0},
		{"example9", []string{"key1", "value_1"}, 0},                                        // one value, nothing to escape
		{"example11", []string{"files", "files/a.pdf"}, 0},                                  // shared
		{"nowhere", []string{"a", "b"}, 0},                                                  // no domain
		{"example10", []string{"route", "api", "http_method", "GET", "subject_id", "1"}, 1}, // the joined tenant
	}
	for _, c := range cases {
		es := entries(c.kv...)
		got := testing.AllocsPerRun(100, func() { rs.match(c.domain, es) })
		if got != c.allocs {
			t.Errorf("match(%s, %q): %v allocations, want %v", c.domain, c.kv, got, c.allocs)
		}
	}
}

func TestCompileRuleFields(t *testing.T) {
	rs := mustCompile(t, `domain: d
descriptors:
  - key: fixed
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10, name: f, replaces: [{name: g}, {name: h}]}
    limits: [{unit: day, requests_per_unit: 1000}, {unit: month, requests_per_unit: 20000}]
  - key: sliding
    algorithm: sliding_window
    leases: true
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: bucket
    algorithm: token_bucket
    burst: 25
    rate_limit: {unit: Second, requests_per_unit: 5}
    limits: [{unit: week, requests_per_unit: 7}]
  - key: free
    rate_limit: {unlimited: true, name: free}
`)
	var got []*rule
	rs.each(func(r *rule) { got = append(got, r) })
	const (
		second = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		day    = rlsv3.RateLimitResponse_RateLimit_DAY
		week   = rlsv3.RateLimitResponse_RateLimit_WEEK
		month  = rlsv3.RateLimitResponse_RateLimit_MONTH
	)
	want := []*rule{
		{name: "d.fixed", path: "d.fixed", limitName: "f", replaces: []string{"g", "h"}, shadow: true,
			algorithm: ratelimit.FixedWindow,
			limits:    []limit{{unit: second, perUnit: 10}, {unit: day, perUnit: 1000}, {unit: month, perUnit: 20000}}},
		{name: "d.sliding~sliding", path: "d.sliding", algorithm: ratelimit.SlidingWindow, leases: true,
			limits: []limit{{unit: minute, perUnit: 60}}},
		{name: "d.bucket~bucket", path: "d.bucket", algorithm: ratelimit.TokenBucket,
			limits: []limit{{unit: second, perUnit: 5, burst: 25}, {unit: week, perUnit: 7}}},
		{name: "d.free", path: "d.free", limitName: "free", unlimited: true, algorithm: ratelimit.FixedWindow},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rules, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("rule %d = %+v\nwant %+v", i, got[i], want[i])
		}
	}
	// match gives each its rule, the very one that each reports.
	for i, k := range []string{"fixed", "sliding", "bucket", "free"} {
		if r, _ := rs.match("d", entries(k, "v")); r != got[i] {
			t.Errorf("match(%s) = %p, want %p", k, r, got[i])
		}
	}
}

func TestCompileRuleNames(t *testing.T) {
	nameOf := func(t *testing.T, data string) string {
		t.Helper()
		rs := mustCompile(t, data)
		if len(rs.all) != 1 {
			t.Fatalf("%d rules, want 1", len(rs.all))
		}
		return rs.all[0].name
	}
	const base = "domain: d\ndescriptors:\n  - key: k\n    value: v\n%s    rate_limit: {unit: %s, requests_per_unit: %d}\n"
	mk := func(extra, unit string, n int) string {
		return fmt.Sprintf(base, extra, unit, n)
	}
	n10 := nameOf(t, mk("", "second", 10))
	if n10 != "d.k_v" {
		t.Errorf("name = %q, want d.k_v", n10)
	}
	// A limit's figures do not name it, nor does its unit.
	if n := nameOf(t, mk("", "second", 99)); n != n10 {
		t.Errorf("requests_per_unit changed the name: %q, %q", n10, n)
	}
	if n := nameOf(t, mk("", "minute", 10)); n != n10 {
		t.Errorf("unit changed the name: %q, %q", n10, n)
	}
	if n := nameOf(t, mk("    algorithm: fixed_window\n", "second", 10)); n != n10 {
		t.Errorf("explicit fixed_window changed the name: %q, %q", n10, n)
	}
	// The algorithm does.
	sliding := nameOf(t, mk("    algorithm: sliding_window\n", "second", 10))
	bucket := nameOf(t, mk("    algorithm: token_bucket\n", "second", 10))
	if sliding != "d.k_v~sliding" || bucket != "d.k_v~bucket" {
		t.Errorf("names = %q, %q", sliding, bucket)
	}

	// Long paths, and bytes the library's names do not take, are hashed.
	long := "domain: d\ndescriptors:\n  - key: " + strings.Repeat("k", 80) + "\n    rate_limit: {unit: second}\n"
	spaced := "domain: d\ndescriptors:\n  - key: k\n    value: a b\n    rate_limit: {unit: second}\n"
	quoted := "domain: d\ndescriptors:\n  - key: k\n    value: 'a\"b'\n    rate_limit: {unit: second}\n"
	slashed := "domain: d\ndescriptors:\n  - key: k\n    value: 'a\\b'\n    rate_limit: {unit: second}\n"
	unicode := "domain: d\ndescriptors:\n  - key: k\n    value: é\n    rate_limit: {unit: second}\n"
	seen := make(map[string]bool)
	for _, data := range []string{long, spaced, quoted, slashed, unicode} {
		n := nameOf(t, data)
		if len(n) != 30 || !strings.HasPrefix(n, "envoy-") || strings.Trim(n[6:], "0123456789abcdef") != "" {
			t.Errorf("name = %q, want envoy- and 24 hexadecimal digits", n)
		}
		if seen[n] {
			t.Errorf("name %q twice", n)
		}
		seen[n] = true
		if again := nameOf(t, data); again != n {
			t.Errorf("name not stable: %q, %q", n, again)
		}
	}
	if n := nameOf(t, long); n != ruleName("d."+strings.Repeat("k", 80)) {
		t.Errorf("long name = %q", n)
	}
	// The path stays readable.
	rs := mustCompile(t, long)
	if p := rs.all[0].path; p != "d."+strings.Repeat("k", 80) {
		t.Errorf("path = %q", p)
	}
	// Exactly 64 bytes is not hashed; 65 is.
	if n := ruleName(strings.Repeat("a", 64)); n != strings.Repeat("a", 64) {
		t.Errorf("64 bytes: %q", n)
	}
	if n := ruleName(strings.Repeat("a", 65)); len(n) != 30 {
		t.Errorf("65 bytes: %q", n)
	}
	// The suffix counts towards the length and is hashed with the rest.
	p := strings.Repeat("a", 60)
	if ruleName(p) != p || ruleName(p+"~sliding") == ruleName(p+"~bucket") || len(ruleName(p+"~sliding")) != 30 {
		t.Errorf("suffixed names: %q, %q", ruleName(p+"~sliding"), ruleName(p+"~bucket"))
	}
}

func TestCompileEmpty(t *testing.T) {
	rs, err := compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	if rs.has("") || rs.has("d") {
		t.Error("an empty configuration has a domain")
	}
	if r, tenant := rs.match("d", entries("k", "v")); r != nil || tenant != "" {
		t.Errorf("match = %v, %q", r, tenant)
	}
	n := 0
	rs.each(func(*rule) { n++ })
	if n != 0 {
		t.Errorf("each called %d times", n)
	}
}

// has reports whether domain is configured.
func (rs *rules) has(domain string) bool {
	_, ok := rs.domains[domain]
	return ok
}

// each calls f for every rule, in the configuration's order.
func (rs *rules) each(f func(*rule)) {
	for _, r := range rs.all {
		f(r)
	}
}

package envoyrls

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// domainsOf lists cfgs' domains in order.
func domainsOf(cfgs []Config) []string {
	ds := make([]string, len(cfgs))
	for i, c := range cfgs {
		ds[i] = c.Domain
	}
	return ds
}

// mustLoad loads path and compiles it, failing the test on an error.
func mustLoad(t *testing.T, path string) ([]Config, *rules) {
	t.Helper()
	cfgs, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig(%s): %v", path, err)
	}
	rs, err := compile(cfgs)
	if err != nil {
		t.Fatalf("compile(%s): %v", path, err)
	}
	return cfgs, rs
}

func TestLoadConfigReadmeExamples(t *testing.T) {
	cfgs, _ := mustLoad(t, "testdata/config")
	// Sorted by file name; example11.yml holds two documents and so does
	// example10.yaml. .hidden.yaml, notes.txt and the subdirectories are
	// not read.
	want := []string{
		"mongo_cps",
		"example10", "example10_wildcard",
		"example11", "example11_metrics",
		"messaging", "edge_proxy_per_ip", "example4", "internal",
		"example6", "example7", "example8", "example9",
	}
	if got := domainsOf(cfgs); !reflect.DeepEqual(got, want) {
		t.Fatalf("domains = %q, want %q", got, want)
	}
	by := make(map[string]Config)
	for _, c := range cfgs {
		by[c.Domain] = c
	}

	// Example 1: two siblings of one key.
	if d := by["mongo_cps"].Descriptors; len(d) != 2 || d[1].Key != "database" || d[1].Value != "default" ||
		d[1].RateLimit.Unit != "second" || d[1].RateLimit.RequestsPerUnit != 500 {
		t.Errorf("example 1 = %+v", d)
	}
	// Example 2: a placeholder with a nested key-only descriptor.
	msg := by["messaging"].Descriptors
	if msg[0].RateLimit != nil || len(msg[0].Descriptors) != 1 || msg[0].Descriptors[0].Key != "to_number" ||
		msg[0].Descriptors[0].Value != "" || msg[0].Descriptors[0].RateLimit.RequestsPerUnit != 5 {
		t.Errorf("example 2, first descriptor = %+v", msg[0])
	}
	// Example 3: requests_per_unit 0.
	if rl := by["edge_proxy_per_ip"].Descriptors[1].RateLimit; rl.RequestsPerUnit != 0 || rl.Unit != "second" {
		t.Errorf("example 3 blacklist = %+v", rl)
	}
	// Example 5: unlimited without a unit.
	if rl := by["internal"].Descriptors[0].RateLimit; !rl.Unlimited || rl.Unit != "" {
		t.Errorf("example 5 ldap = %+v", rl)
	}
	// Example 6: shadow_mode on the descriptor, not in rate_limit.
	if u := by["example6"].Descriptors[0].Descriptors; !u[0].ShadowMode || u[1].ShadowMode {
		t.Errorf("example 6 shadow_mode = %v, %v", u[0].ShadowMode, u[1].ShadowMode)
	}
	// Example 7: name and replaces.
	e7 := by["example7"].Descriptors
	if e7[0].Descriptors[0].RateLimit.Name != "specific_limit" ||
		!reflect.DeepEqual(e7[1].Descriptors[0].RateLimit.Replaces, []Replace{{Name: "specific_limit"}}) {
		t.Errorf("example 7 = %+v", e7)
	}
	// Example 8: detailed_metric is accepted.
	if !by["example8"].Descriptors[0].DetailedMetric {
		t.Error("example 8: detailed_metric not read")
	}
	// Example 9: a wildcard value.
	if v := by["example9"].Descriptors[0].Value; v != "value*" {
		t.Errorf("example 9 value = %q", v)
	}
	// Example 10: value_to_metric is accepted.
	if !by["example10"].Descriptors[0].ValueToMetric {
		t.Error("example 10: value_to_metric not read")
	}
	// Example 11: share_threshold, true and false.
	if d := by["example11"].Descriptors; !d[0].ShareThreshold || d[1].ShareThreshold {
		t.Errorf("example 11 share_threshold = %v, %v", d[0].ShareThreshold, d[1].ShareThreshold)
	}
}

func TestLoadConfigFile(t *testing.T) {
	cfgs, rs := mustLoad(t, "testdata/config/example4b/example4.yaml")
	if got := domainsOf(cfgs); !reflect.DeepEqual(got, []string{"example4"}) {
		t.Fatalf("domains = %q", got)
	}
	if !rs.has("example4") || rs.has("example4b") {
		t.Errorf("has: example4 %v, example4b %v", rs.has("example4"), rs.has("example4b"))
	}
}

func TestLoadConfigIntegration(t *testing.T) {
	cfgs, rs := mustLoad(t, "testdata/config/integration")
	want := []string{"another", "basic", "reload", "share-threshold-test"}
	if got := domainsOf(cfgs); !reflect.DeepEqual(got, want) {
		t.Fatalf("domains = %q, want %q", got, want)
	}
	var paths []string
	rs.each(func(r *rule) { paths = append(paths, r.path) })
	if len(paths) != 14 {
		t.Errorf("%d rules, want 14: %q", len(paths), paths)
	}
}

func TestLoadConfigSymlinks(t *testing.T) {
	// A Kubernetes ConfigMap's mount: the files are links into a hidden
	// directory, which LoadConfig does not read itself.
	dir := t.TempDir()
	data := filepath.Join(dir, "..2024_01_01")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2024_01_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/a.yaml", filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err) // a directory by a YAML name: not read
	}
	cfgs, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := domainsOf(cfgs); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("domains = %q, want [a]", got)
	}
}

func TestLoadConfigEmptyDirectory(t *testing.T) {
	cfgs, err := LoadConfig(t.TempDir())
	if err != nil || len(cfgs) != 0 {
		t.Errorf("LoadConfig(empty) = %v, %v; want none, nil", cfgs, err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	if _, err := LoadConfig("testdata/config/missing"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing path: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "b.yml")
	if err := os.WriteFile(bad, []byte("domain: b\ndescriptors:\n  - key: k\n    quota_mode: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(dir)
	if err == nil || !strings.Contains(err.Error(), bad+": document 1: line 4: unknown key \"quota_mode\"") {
		t.Errorf("LoadConfig = %v, want the file and the key", err)
	}
}

func TestParseConfigMultiDocument(t *testing.T) {
	data := `---
domain: one
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
---
# the second
domain: two
descriptors:
  - key: b
    rate_limit: {unit: MINUTE, requests_per_unit: 2}
`
	cfgs, err := ParseConfig("multi.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []Config{
		{Domain: "one", Descriptors: []Descriptor{{Key: "a", RateLimit: &RateLimit{Unit: "second", RequestsPerUnit: 1}}}},
		{Domain: "two", Descriptors: []Descriptor{{Key: "b", RateLimit: &RateLimit{Unit: "MINUTE", RequestsPerUnit: 2}}}},
	}
	if !reflect.DeepEqual(cfgs, want) {
		t.Errorf("ParseConfig = %+v, want %+v", cfgs, want)
	}
	// An error in the second document says which.
	_, err = ParseConfig("multi.yaml", []byte("domain: one\n---\ndomain: two\nfoo: 1\n"))
	if err == nil || !strings.Contains(err.Error(), `multi.yaml: document 2: line 4: unknown key "foo"`) {
		t.Errorf("error = %v", err)
	}
}

func TestParseConfigOwnFields(t *testing.T) {
	data := `domain: d
descriptors:
  - key: k
    algorithm: token_bucket
    burst: 7
    leases: true
    rate_limit: {unit: second, requests_per_unit: 5}
    limits:
      - {unit: day, requests_per_unit: 1000}
`
	cfgs, err := ParseConfig("own.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := Descriptor{
		Key: "k", Algorithm: "token_bucket", Burst: 7, Leases: true,
		RateLimit: &RateLimit{Unit: "second", RequestsPerUnit: 5},
		Limits:    []Limit{{Unit: "day", RequestsPerUnit: 1000}},
	}
	if got := cfgs[0].Descriptors[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("descriptor = %+v, want %+v", got, want)
	}
}

func TestParseConfigScalars(t *testing.T) {
	// Keys and values are strings whatever they look like; whole numbers
	// may be written as YAML writes integers.
	cfgs := mustParse(t, "domain: 7\ndescriptors:\n  - key: 10\n    value: 1.50\n    rate_limit: {unit: second, requests_per_unit: 0x10}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1_000}\n")
	d := cfgs[0].Descriptors
	if cfgs[0].Domain != "7" || d[0].Key != "10" || d[0].Value != "1.50" || d[0].RateLimit.RequestsPerUnit != 16 ||
		d[1].RateLimit.RequestsPerUnit != 1000 {
		t.Errorf("configuration = %+v", cfgs)
	}
}

func TestParseConfigEmpty(t *testing.T) {
	for _, data := range []string{"", "# only a comment\n"} {
		_, err := ParseConfig("empty.yaml", []byte(data))
		if err == nil || !strings.Contains(err.Error(), "empty.yaml: no configuration") {
			t.Errorf("ParseConfig(%q) = %v", data, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"quota_mode", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			`f.yaml: document 1: line 4: unknown key "quota_mode": this server does not support it`},
		{"unit at the top", "domain: d\nunit: second\n",
			`line 2: unknown key "unit": this server does not support it`},
		{"unknown in rate_limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      burst: 3\n",
			`line 6: unknown key "burst"`},
		{"unknown in replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      replaces: [{nam: x}]\n",
			`line 5: unknown key "nam"`},
		{"unknown in limits", "domain: d\ndescriptors:\n  - key: k\n    limits: [{units: day}]\n",
			`line 4: unknown key "units"`},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			"line 4: cannot unmarshal !!int `-1` into uint32"},
		{"fraction", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
			"f.yaml: document 1: line 4: requests_per_unit: 1.5 is not a whole number"},
		{"whole fraction", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2.0}\n",
			"line 4: requests_per_unit: 2.0 is not a whole number"},
		{"exponent", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1e3}\n",
			"requests_per_unit: 1e3 is not a whole number"},
		{"fractional burst", "domain: d\n---\ndomain: e\ndescriptors:\n  - key: k\n    burst: 0.5\n",
			"document 2: line 6: burst: 0.5 is not a whole number"},
		{"too big", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
			"line 4: cannot unmarshal !!int `4294967296` into uint32"},
		{"key twice", "domain: d\ndomain: e\n", `line 2: mapping key "domain" already defined at line 1`},
		{"not a mapping", "- domain: d\n", "cannot unmarshal !!seq into envoyrls.Config"},
		{"syntax", "domain: [d\n", "f.yaml: document 1: yaml:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfgs, err := ParseConfig("f.yaml", []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseConfig = %v, %v; want an error containing %q", cfgs, err, c.want)
			}
			if cfgs != nil {
				t.Errorf("configurations beside the error: %v", cfgs)
			}
		})
	}
}

// mustParse parses data, failing the test on an error.
func mustParse(t *testing.T, data string) []Config {
	t.Helper()
	cfgs, err := ParseConfig("t.yaml", []byte(data))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfgs
}

func TestCompileErrors(t *testing.T) {
	const head = "domain: d\ndescriptors:\n"
	cases := []struct{ name, yaml, want string }{
		// The reference's.
		{"empty domain", "descriptors: []\n", "envoyrls: configuration 1 of 1: empty domain (domain:)"},
		{"duplicate domain", "domain: d\n---\ndomain: e\n---\ndomain: d\n", "envoyrls: d: duplicate domain"},
		{"empty key", head + "  - key: a\n    descriptors:\n      - value: v\n",
			"envoyrls: d: a.descriptors[0]: empty key (key:)"},
		{"empty key at the top", head + "  - value: v\n", "envoyrls: d: descriptors[0]: empty key"},
		{"duplicate", head + "  - key: a\n    value: b\n  - key: a\n    value: b\n",
			"envoyrls: d: a_b: duplicate descriptor composite key 'd.a_b' among its siblings"},
		{"duplicate by final key", head + "  - key: a_b\n  - key: a\n    value: b\n",
			"duplicate descriptor composite key 'd.a_b'"},
		{"duplicate nested", head + "  - key: a\n    descriptors:\n      - key: b\n      - key: b\n",
			"envoyrls: d: a.b: duplicate descriptor composite key 'd.a.b'"},
		{"unlimited with unit", head + "  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
			`envoyrls: d: a: rate_limit: unlimited should not specify a unit, but unit is "second"`},
		{"invalid unit", head + "  - key: a\n    rate_limit: {unit: fortnight}\n",
			`envoyrls: d: a: rate_limit: invalid unit "fortnight"`},
		{"unknown unit", head + "  - key: a\n    rate_limit: {unit: unknown}\n", `rate_limit: invalid unit "unknown"`},
		{"missing unit", head + "  - key: a\n    rate_limit: {requests_per_unit: 3}\n", "envoyrls: d: a: rate_limit: missing unit"},
		{"empty replaces", head + "  - key: a\n    rate_limit: {unit: second, replaces: [{name: x}, {}]}\n",
			"envoyrls: d: a: rate_limit.replaces[1]: empty name"},
		{"replaces itself", head + "  - key: a\n    rate_limit: {unit: second, name: n, replaces: [{name: n}]}\n",
			`envoyrls: d: a: rate_limit.replaces[0]: "n" is this descriptor's own name`},
		{"share_threshold without wildcard", head + "  - key: a\n    value: b\n    share_threshold: true\n",
			`envoyrls: d: a_b: share_threshold can only be used with a wildcard value (ending with '*'), but the value is "b"`},
		{"share_threshold on a bare key", head + "  - key: a*\n    share_threshold: true\n",
			`share_threshold can only be used with a wildcard value`},
		// This server's.
		{"algorithm", head + "  - key: a\n    algorithm: Sliding_Window\n    rate_limit: {unit: second}\n",
			`envoyrls: d: a: algorithm "Sliding_Window": want fixed_window, sliding_window or token_bucket`},
		{"burst without token_bucket", head + "  - key: a\n    algorithm: sliding_window\n    burst: 3\n    rate_limit: {unit: second}\n",
			"envoyrls: d: a: burst is for algorithm token_bucket only"},
		{"burst by default", head + "  - key: a\n    burst: 3\n    rate_limit: {unit: second}\n",
			"burst is for algorithm token_bucket only"},
		{"burst too big", head + "  - key: a\n    algorithm: token_bucket\n    burst: 9007199254740993\n    rate_limit: {unit: second}\n",
			"burst 9007199254740993: want at most 2^53"},
		{"algorithm without rate_limit", head + "  - key: a\n    algorithm: token_bucket\n",
			"envoyrls: d: a: algorithm needs a rate_limit"},
		{"limits without rate_limit", head + "  - key: a\n    limits: [{unit: day}]\n", "envoyrls: d: a: limits needs a rate_limit"},
		{"leases without rate_limit", head + "  - key: a\n    leases: true\n", "envoyrls: d: a: leases needs a rate_limit"},
		{"burst without rate_limit", head + "  - key: a\n    burst: 2\n", "envoyrls: d: a: burst needs a rate_limit"},
		{"algorithm unlimited", head + "  - key: a\n    algorithm: sliding_window\n    rate_limit: {unlimited: true}\n",
			"envoyrls: d: a: algorithm needs a rate_limit that is not unlimited"},
		{"leases unlimited", head + "  - key: a\n    leases: true\n    rate_limit: {unlimited: true}\n",
			"leases needs a rate_limit that is not unlimited"},
		{"limits unlimited", head + "  - key: a\n    limits: []\n    rate_limit: {unlimited: true}\n",
			"limits needs a rate_limit that is not unlimited"},
		{"sliding per week", head + "  - key: a\n    algorithm: sliding_window\n    rate_limit: {unit: week}\n",
			"envoyrls: d: a: rate_limit: unit WEEK with algorithm sliding_window: want SECOND, MINUTE, HOUR or DAY"},
		{"bucket per month", head + "  - key: a\n    algorithm: token_bucket\n    rate_limit: {unit: Month}\n",
			"rate_limit: unit MONTH with algorithm token_bucket: want SECOND, MINUTE, HOUR or DAY"},
		{"bucket per year", head + "  - key: a\n    algorithm: token_bucket\n    rate_limit: {unit: year}\n",
			"rate_limit: unit YEAR with algorithm token_bucket"},
		{"limit unit", head + "  - key: a\n    rate_limit: {unit: second}\n    limits: [{unit: day}, {unit: eon}]\n",
			`envoyrls: d: a: limits[1]: invalid unit "eon"`},
		{"limit missing unit", head + "  - key: a\n    rate_limit: {unit: second}\n    limits: [{requests_per_unit: 4}]\n",
			"envoyrls: d: a: limits[0]: missing unit"},
		{"limit as rate_limit", head + "  - key: a\n    rate_limit: {unit: minute}\n    limits: [{unit: Minute}]\n",
			"envoyrls: d: a: limits[0]: two limits per MINUTE"},
		{"limits twice", head + "  - key: a\n    rate_limit: {unit: second}\n    limits: [{unit: day}, {unit: week}, {unit: DAY}]\n",
			"envoyrls: d: a: limits[2]: two limits per DAY"},
		{"five limits", head + "  - key: a\n    rate_limit: {unit: second}\n    limits: [{unit: minute}, {unit: hour}, {unit: day}, {unit: week}, {unit: month}]\n",
			"envoyrls: d: a: limits: 5 entries: want at most 4"},
		{"deep", head + "  - key: a\n    descriptors:\n      - key: b\n        value: c\n        descriptors:\n          - key: e\n            rate_limit: {unit: hour}\n            limits: [{unit: hour}]\n",
			"envoyrls: d: a.b_c.e: limits[0]: two limits per HOUR"},
		{"name taken", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second}\n---\ndomain: d.a\ndescriptors:\n  - key: b\n    rate_limit: {unit: second}\n",
			`envoyrls: d.a: b: its counts would be named "d.a.b", as those of a.b in domain "d" are`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs, err := compile(mustParse(t, c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("compile = %v; want an error containing %q", err, c.want)
			}
			if rs != nil {
				t.Errorf("rules beside the error: %+v", rs)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	// What the reference accepts and so does this server.
	data := `domain: d
descriptors:
  - key: zero
    rate_limit: {unit: second}
  - key: nothing
  - key: unlimited_with_figures
    rate_limit: {unlimited: true, requests_per_unit: 5}
  - key: replaces_unnamed
    rate_limit: {unit: second, replaces: [{name: other}]}
  - key: upper
    rate_limit: {unit: YEAR, requests_per_unit: 1}
  - key: mixed
    value: v
    rate_limit: {unit: wEeK, requests_per_unit: 1}
  - key: star
    value: "*"
    share_threshold: true
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: bucket
    algorithm: token_bucket
    burst: 9007199254740992
    rate_limit: {unit: day, requests_per_unit: 1}
    limits: [{unit: week}, {unit: month}, {unit: year}, {unit: hour}]
  - key: fixed
    algorithm: fixed_window
    rate_limit: {unit: month, requests_per_unit: 1}
    limits: [{unit: year, requests_per_unit: 0}]
`
	rs, err := compile(mustParse(t, data))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rs.all); n != 8 {
		t.Errorf("%d rules, want 8 (one for each descriptor with rate_limit)", n)
	}
}

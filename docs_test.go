package ratelimit

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs/stores.md shows two whole stores, examples/fixedstore and
// examples/mapstore, word for word, so that what a reader copies compiles
// and passes storetest.
func TestStoresDocIsTheExample(t *testing.T) {
	doc := readFile(t, filepath.Join("docs", "stores.md"))
	for _, path := range []string{
		filepath.Join("examples", "fixedstore", "fixedstore.go"),
		filepath.Join("examples", "mapstore", "mapstore.go"),
	} {
		if !hasGoBlock(doc, readFile(t, path)) {
			t.Errorf("docs/stores.md has no go block that is %s word for word", path)
		}
	}
}

// The figures of the side-by-side run that the README and docs/ quote are
// those of the run recorded in docs/benchmarks-raw.txt, the same in every
// place that states them: each figure is computed here from the raw
// output as bench/cmd/ratios computes it (the median of the rounds), and
// every statement of it in the files named must give it.
func TestDocsQuoteTheRecordedRun(t *testing.T) {
	raw := parseBenchRaw(t, readFile(t, filepath.Join("docs", "benchmarks-raw.txt")))
	ratio := func(a, b string) string {
		return fmt.Sprintf("%.2f", raw.median(t, a, "ns/op")/raw.median(t, b, "ns/op"))
	}
	claims := []struct {
		what    string
		figure  string
		pattern string // its group is the figure, in text whose spaces and line breaks are single spaces
		files   []string
	}{
		{
			what:    "Redis commands a request of a tenant at 200 × its limit, 64 callers",
			figure:  strconv.FormatFloat(raw.median(t, "BenchmarkFlood/redis/callers=64/ratelimit", "cmds/req"), 'g', 2, 64),
			pattern: `200 × its limit[^.|]*?(?:\| )?(\d[\d.]*) (?:Redis )?commands`,
			files:   []string{"README.md", "docs/algorithms.md", "docs/benchmarks.md"},
		},
		{
			what:    "the Fiber v2 middleware's time in memory ÷ Fiber's own limiter's",
			figure:  ratio("BenchmarkHandler/memory/tenants=10000/ratelimit", "BenchmarkHandler/memory/tenants=10000/fiber-limiter"),
			pattern: `(\d+\.\d+) × (?:the time of )?Fiber's own limiter`,
			files:   []string{"README.md", "docs/benchmarks.md"},
		},
		{
			what:    "a lone request's time ÷ the raw loop's, alternated",
			figure:  fmt.Sprintf("%.2f", raw.median(t, "BenchmarkHandlerLone/redis/opts=default/paired", "ratelimit/raw")),
			pattern: `(\d+\.\d+) × (?:its|the raw loop's) latency`,
			files:   []string{"README.md", "docs/benchmarks.md"},
		},
	}
	for _, c := range claims {
		re := regexp.MustCompile(c.pattern)
		for _, file := range c.files {
			text := strings.Join(strings.Fields(readFile(t, file)), " ")
			found := re.FindAllStringSubmatch(text, -1)
			if len(found) == 0 {
				t.Errorf("%s does not state %s (%s, from docs/benchmarks-raw.txt)", file, c.what, c.figure)
			}
			for _, m := range found {
				if m[1] != c.figure {
					t.Errorf("%s states %s as %s; the recorded run gives %s (%q)", file, c.what, m[1], c.figure, m[0])
				}
			}
		}
	}
}

// benchRaw holds each benchmark's values by unit, one per round, from
// go test -bench output.
type benchRaw map[string]map[string][]float64

func parseBenchRaw(t *testing.T, out string) benchRaw {
	t.Helper()
	raw := benchRaw{}
	suffix := regexp.MustCompile(`-\d+$`)
	// A line that the code under test logs while a benchmark runs lands
	// between its name and its figures, which then start a line of their
	// own (as cmd/ratios reads them too).
	pending := ""
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 1 && strings.HasPrefix(f[0], "Benchmark") {
			pending = f[0]
			continue
		}
		if len(f) > 0 && pending != "" {
			if _, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				f = append([]string{pending}, f...)
			}
		}
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") {
			pending = ""
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := suffix.ReplaceAllString(f[0], "")
		if raw[name] == nil {
			raw[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				t.Fatalf("%s: %q is not a number", f[0], f[i])
			}
			raw[name][f[i+1]] = append(raw[name][f[i+1]], v)
		}
	}
	return raw
}

// median is the median of a benchmark's values in unit over the rounds.
func (r benchRaw) median(t *testing.T, bench, unit string) float64 {
	t.Helper()
	xs := slices.Sorted(slices.Values(r[bench][unit]))
	n := len(xs)
	if n == 0 {
		t.Fatalf("docs/benchmarks-raw.txt has no %s of %s", unit, bench)
	}
	if n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[n/2]
}

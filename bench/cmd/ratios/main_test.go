package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Two rounds of a memory group and a Redis group, and a group the chart
// does not draw. Medians: memory bare 100, floor-noop 125, ratelimit 200,
// fiber-limiter 400; Redis bare 300, raw-multi-exec 30000, ratelimit
// 12500, redis-rate 60000.
const input = `goos: linux
goarch: amd64
pkg: github.com/gatewaykit/ratelimit/bench
# round 1 of 2
BenchmarkCounter/memory/keys=1/ratelimit-2         	 1000000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/memory/tenants=1/bare-2           	 1000000	        90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/memory/tenants=1/floor-noop-2     	 1000000	       125 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/memory/tenants=1/ratelimit-2      	 1000000	       200 ns/op	      16 B/op	       1 allocs/op
BenchmarkHandler/memory/tenants=1/fiber-limiter-2  	 1000000	       400 ns/op	      64 B/op	       4 allocs/op
BenchmarkHandler/redis/opts=default/tenants=1/bare-2           	 1000000	       300 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/redis/opts=default/tenants=1/ratelimit-2      	  100000	     10000 ns/op	    1600 B/op	      37 allocs/op	         0 failopen
BenchmarkHandler/redis/opts=default/tenants=1/redis-rate-2     	   20000	     60000 ns/op	     700 B/op	      24 allocs/op
BenchmarkHandler/redis/opts=default/tenants=1/raw-multi-exec-2 	   40000	     30000 ns/op	    1000 B/op	      27 allocs/op
# round 2 of 2
BenchmarkCounter/memory/keys=1/ratelimit-2         	 1000000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/memory/tenants=1/bare-2           	 1000000	       110 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/memory/tenants=1/floor-noop-2     	 1000000	       125 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/memory/tenants=1/ratelimit-2      	 1000000	       200 ns/op	      16 B/op	       1 allocs/op
BenchmarkHandler/memory/tenants=1/fiber-limiter-2  	 1000000	       400 ns/op	      64 B/op	       4 allocs/op
BenchmarkHandler/redis/opts=default/tenants=1/bare-2           	 1000000	       300 ns/op	       0 B/op	       0 allocs/op
BenchmarkHandler/redis/opts=default/tenants=1/ratelimit-2      	  100000	     15000 ns/op	    1600 B/op	      37 allocs/op	         0 failopen
BenchmarkHandler/redis/opts=default/tenants=1/redis-rate-2     	   20000	     60000 ns/op	     700 B/op	      24 allocs/op
BenchmarkHandler/redis/opts=default/tenants=1/raw-multi-exec-2 	   40000	     30000 ns/op	    1000 B/op	      27 allocs/op
PASS
`

// The SVG as the test reads it: panels of bars, each bar a name, a rect
// (the bar, then the value's white ground) and its value.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Panels  []struct {
		Class string   `xml:"class,attr"`
		Texts []string `xml:"text"`
		Bars  []struct {
			Class string   `xml:"class,attr"`
			Texts []string `xml:"text"`
			Rects []struct {
				Fill string `xml:"fill,attr"`
			} `xml:"rect"`
		} `xml:"g"`
	} `xml:"g"`
	Texts []string `xml:"text"`
}

func runRatios(t *testing.T, in string, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	if code := run(args, strings.NewReader(in), &out, &errw); code != 0 {
		t.Fatalf("run(%q) = %d, stderr: %s", args, code, errw.String())
	}
	return out.String(), errw.String()
}

func TestChart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chart.svg")
	plain, _ := runRatios(t, input)
	withSVG, _ := runRatios(t, input, "-svg", file)
	if withSVG != plain {
		t.Errorf("the tables change with -svg:\n%s\nwithout:\n%s", withSVG, plain)
	}
	if !strings.Contains(plain, "| ratelimit | 200 | 16 | 1 | 2.00 | +100 | 1.00 |") {
		t.Errorf("the memory table lacks ratelimit's row:\n%s", plain)
	}

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the SVG is not XML: %v\n%s", err, data)
	}
	for _, banned := range []string{"<script", "<image", "href", "@import", "<style"} {
		if bytes.Contains(data, []byte(banned)) {
			t.Errorf("the SVG contains %q", banned)
		}
	}

	type row struct{ name, value string }
	want := [][]row{
		{{"bare", "1.00×"}, {"floor-noop", "0.80×"}, {"ratelimit", "0.50×"}, {"fiber-limiter", "0.25×"}},
		// bare is left out of the Redis panels.
		{{"ratelimit", "2.40×"}, {"raw-multi-exec", "1.00×"}, {"redis-rate", "0.50×"}},
	}
	if len(doc.Panels) != len(want) {
		t.Fatalf("%d panels, want %d", len(doc.Panels), len(want))
	}
	for i, p := range doc.Panels {
		var got []row
		for _, b := range p.Bars {
			if b.Class != "bar" || len(b.Texts) != 2 || len(b.Rects) == 0 {
				t.Fatalf("panel %d: a bar of %d texts and %d rects", i, len(b.Texts), len(b.Rects))
			}
			got = append(got, row{b.Texts[0], b.Texts[1]})
			isOurs := b.Rects[0].Fill == colourOurs
			if isOurs != (b.Texts[0] == ours) {
				t.Errorf("panel %d: %s's bar is %s", i, b.Texts[0], b.Rects[0].Fill)
			}
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("panel %d: bars %v, want %v", i, got, want[i])
		}
	}
	if title := doc.Panels[0].Texts[0]; !strings.Contains(title, "bare = 1.0") {
		t.Errorf("memory panel's title %q does not say what 1.0 is", title)
	}
	if title := doc.Panels[1].Texts[0]; !strings.Contains(title, "raw-multi-exec = 1.0") {
		t.Errorf("Redis panel's title %q does not say what 1.0 is", title)
	}
	if legend := doc.Texts[len(doc.Texts)-1]; !strings.Contains(legend, "medians of 2 runs") {
		t.Errorf("legend %q does not say medians of 2 runs", legend)
	}
}

func TestChartNothingToDraw(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chart.svg")
	in := "BenchmarkCounter/memory/keys=1/ratelimit-2 \t 1000000 \t 50.0 ns/op \t 0 B/op \t 0 allocs/op\n"
	plain, _ := runRatios(t, in)
	withSVG, stderr := runRatios(t, in, "-svg", file)
	if withSVG != plain {
		t.Errorf("the tables change with -svg:\n%s\nwithout:\n%s", withSVG, plain)
	}
	if !strings.Contains(stderr, "not written") {
		t.Errorf("no warning on stderr: %q", stderr)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("%s written with nothing to draw (stat: %v)", file, err)
	}
}

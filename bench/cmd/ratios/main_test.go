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

func TestQuotaTargets(t *testing.T) {
	in := `BenchmarkQuotas/take/memory/tenants=10000/ratelimit-2 	 1000000 	 100 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
BenchmarkQuotas/take/memory/tenants=10000/ratelimit-quotas-2 	 1000000 	 140 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
BenchmarkQuotas/fiber/memory/tenants=10000/bare-2 	 1000000 	 50 ns/op 	 0 B/op 	 0 allocs/op
BenchmarkQuotas/fiber/memory/tenants=10000/ratelimit-2 	 1000000 	 200 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
BenchmarkQuotas/fiber/memory/tenants=10000/ratelimit-quotas-2 	 1000000 	 400 ns/op 	 0 failopen 	 256 B/op 	 1 allocs/op
BenchmarkQuotas/take/redis/opts=ctxtimeout/tenants=10000/ratelimit-2 	 100000 	 10000 ns/op 	 0 failopen 	 700 B/op 	 3 allocs/op
BenchmarkQuotas/take/redis/opts=ctxtimeout/tenants=10000/ratelimit-quotas-2 	 100000 	 12000 ns/op 	 0 failopen 	 900 B/op 	 3 allocs/op
`
	out, _ := runRatios(t, in)
	for _, row := range []string{
		"| time with two quotas ÷ the main limit alone's, in memory | BenchmarkQuotas/take/memory/tenants=10000 | 1.40 × | ≤ 1.5 | yes | 140 vs 100 ns/op |",
		"| time with two quotas ÷ the main limit alone's, in memory | BenchmarkQuotas/fiber/memory/tenants=10000 | 2.00 × | ≤ 1.5 | no | 400 vs 200 ns/op |",
		"| time with two quotas ÷ the main limit alone's, Redis, 64 callers | BenchmarkQuotas/take/redis/opts=ctxtimeout/tenants=10000 | 1.20 × | ≤ 1.3 | yes | 12000 vs 10000 ns/op |",
		"| allocations per request with two quotas, in memory | BenchmarkQuotas/take/memory/tenants=10000 | 0 | 0 | yes | without quotas 0 |",
		"| allocations per request with two quotas, in memory | BenchmarkQuotas/fiber/memory/tenants=10000 | 1 | 0 | no | without quotas 0 |",
		"| ratelimit-quotas | 12000 | 900 | 3 | 1.20 |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
}

func TestGiveBackTargets(t *testing.T) {
	in := `BenchmarkGiveBack/fiber/redis/opts=ctxtimeout/tenants=10000/ratelimit-2 	 100000 	 10000 ns/op 	 0 failopen 	 1000 B/op 	 5 allocs/op
BenchmarkGiveBack/fiber/redis/opts=ctxtimeout/tenants=10000/ratelimit-skipfailed-2 	 100000 	 10300 ns/op 	 0 failopen 	 1000 B/op 	 5 allocs/op
BenchmarkGiveBack/take/redis/opts=ctxtimeout/tenants=10000/ratelimit-2 	 100000 	 9000 ns/op 	 0 failopen 	 900 B/op 	 5 allocs/op
BenchmarkGiveBack/take/redis/opts=ctxtimeout/tenants=10000/ratelimit-inflight-2 	 50000 	 20000 ns/op 	 0 failopen 	 0 releasefail 	 2000 B/op 	 18 allocs/op
`
	out, _ := runRatios(t, in)
	for _, row := range []string{
		"| time of a request that succeeds with SkipFailedRequests ÷ without, Redis, 64 callers | BenchmarkGiveBack/fiber/redis/opts=ctxtimeout/tenants=10000 | 1.03 × | ≤ 1.05 | yes | 10300 vs 10000 ns/op |",
		"| throughput of InFlight (Take and Release) ÷ a fixed window's (Take), Redis, 64 callers | BenchmarkGiveBack/take/redis/opts=ctxtimeout/tenants=10000 | 0.45 × | ≥ 0.5 | no | 20000 vs 9000 ns/op |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
}

func TestTokenBucketTargets(t *testing.T) {
	in := `BenchmarkTokenBucket/memory/tenants=10000/ratelimit-2 	 1000000 	 100 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
BenchmarkTokenBucket/memory/tenants=10000/ratelimit-tokenbucket-2 	 1000000 	 105 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
BenchmarkTokenBucket/memory/tenants=10000/x-time-rate-2 	 1000000 	 170 ns/op 	 16 B/op 	 1 allocs/op
BenchmarkTokenBucket/redis/opts=ctxtimeout/tenants=10000/ratelimit-2 	 100000 	 6000 ns/op 	 0 failopen 	 1000 B/op 	 3 allocs/op
BenchmarkTokenBucket/redis/opts=ctxtimeout/tenants=10000/ratelimit-tokenbucket-2 	 100000 	 9000 ns/op 	 0 failopen 	 1100 B/op 	 7 allocs/op
BenchmarkTokenBucket/redis/opts=ctxtimeout/tenants=10000/redis-rate-2 	 50000 	 27000 ns/op 	 700 B/op 	 22 allocs/op
`
	out, _ := runRatios(t, in)
	for _, row := range []string{
		"| time of a TokenBucket's decision ÷ a fixed window's, Redis, 64 callers | BenchmarkTokenBucket/redis/opts=ctxtimeout/tenants=10000 | 1.50 × | ≤ 1.1 | no | 9000 vs 6000 ns/op |",
		"| time of a TokenBucket's decision ÷ a fixed window's, in memory | BenchmarkTokenBucket/memory/tenants=10000 | 1.05 × | ≤ 1.1 | yes | 105 vs 100 ns/op |",
		"| allocations per decision of a TokenBucket, in memory | BenchmarkTokenBucket/memory/tenants=10000 | 0 | 0 | yes | fixed window 0 |",
		"| redis-rate | 27000 | 700 | 22 | 4.50 |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
}

func TestHotTenantTargets(t *testing.T) {
	in := `BenchmarkHotTenant/redis/opts=ctxtimeout/replicas=3/ratelimit-2 	 300000 	 4000 ns/op 	 0.13 cmds/decision 	 250000 decisions/s 	 0 failopen 	 500000 p50-ns 	 4000000 p99-ns 	 0.48 redis-us/decision 	 150 B/op 	 2 allocs/op
BenchmarkHotTenant/redis/opts=ctxtimeout/replicas=3/ratelimit-leases-2 	 5000000 	 250 ns/op 	 0.006 cmds/decision 	 5000 decisions/block 	 4000000 decisions/s 	 0 failopen 	 344 p50-ns 	 688 p99-ns 	 0.004 redis-us/decision 	 0 B/op 	 0 allocs/op
`
	out, _ := runRatios(t, in)
	for _, row := range []string{
		"| ratelimit | 4000 | 150 | 2 | 1.00 | 0.13 | 250000 | 500000 | 4000000 | 0.48 | – |",
		"| ratelimit-leases | 250 | 0 | 0 | 0.06 | 0.006 | 4000000 | 344 | 688 | 0.004 | 5000 |",
		"| Redis commands per decision with Leases, one tenant hot on 3 replicas × 64 callers (cmds/decision) | BenchmarkHotTenant/redis/opts=ctxtimeout/replicas=3 | 0.006 | ≤ 0.005 | no | without 0.13 |",
		"| Redis's time per decision with Leases, µs, one tenant hot on 3 replicas × 64 callers (redis-us/decision) | BenchmarkHotTenant/redis/opts=ctxtimeout/replicas=3 | 0.004 | ≤ 0.05 | yes | without 0.48 |",
		"| decisions per second with Leases ÷ without, one tenant hot on 3 replicas × 64 callers (decisions/s) | BenchmarkHotTenant/redis/opts=ctxtimeout/replicas=3 | 16 × | ≥ 3 | yes | 4000000 vs 250000 decisions/s |",
		"| median time of a decision with Leases ÷ without, one tenant hot on 3 replicas × 64 callers (p50-ns) | BenchmarkHotTenant/redis/opts=ctxtimeout/replicas=3 | 0.000688 × | ≤ 0.1 | yes | 344 vs 500000 p50-ns |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
}

// A line logged while a benchmark runs splits its name from its figures.
func TestLogLineBetweenNameAndFigures(t *testing.T) {
	in := `BenchmarkCounter/memory/keys=1/ratelimit-2 	2026/12/01 20:39:43 ERROR ratelimit: counter failed tenant=t7
   1000000 	 50.0 ns/op 	 3 failopen 	 0 B/op 	 0 allocs/op
--- BENCH: BenchmarkCounter/memory/keys=1/ratelimit-2
    contenders_test.go:305: ratelimit failed open on 3 of 1000000 requests
BenchmarkCounter/memory/keys=1/ratelimit-2 	 1000000 	 70.0 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
`
	out, _ := runRatios(t, in)
	if !strings.Contains(out, "| ratelimit | 60 | 0 | 0 | 1.00 | 1.5 |") {
		t.Errorf("want the median of both runs, 60 ns/op, and 1.5 failopen:\n%s", out)
	}
}

func TestFloorTargets(t *testing.T) {
	in := `BenchmarkHandler/memory/tenants=10000/floor-headers-2 	 1000000 	 400 ns/op 	 0 B/op 	 0 allocs/op
BenchmarkHandler/memory/tenants=10000/ratelimit-2 	 1000000 	 480 ns/op 	 0 failopen 	 0 B/op 	 0 allocs/op
BenchmarkDoors/nethttp/tenants=10000/floor-headers-2 	 1000000 	 200 ns/op 	 0 B/op 	 0 allocs/op
BenchmarkDoors/nethttp/tenants=10000/ratelimit-2 	 1000000 	 600 ns/op 	 128 B/op 	 1 allocs/op
BenchmarkHandlerLone/redis/opts=default/ratelimit-2 	 10000 	 50000 ns/op 	 0 failopen 	 1400 B/op 	 26 allocs/op
BenchmarkHandlerLone/redis/opts=default/ulule-redis-2 	 10000 	 40000 ns/op 	 500 B/op 	 20 allocs/op
BenchmarkHandlerLone/redis/opts=default/raw-multi-exec-2 	 10000 	 44000 ns/op 	 900 B/op 	 27 allocs/op
`
	out, _ := runRatios(t, in)
	for _, row := range []string{
		"| a middleware's time ÷ floor-headers', in-memory counter (Fiber's also without allocating) | BenchmarkHandler/memory/tenants=10000 | 1.20 × | ≤ 1.25 | yes | 480 vs 400 ns/op, 0 allocs/op |",
		"| a middleware's time ÷ floor-headers', in-memory counter (Fiber's also without allocating) | BenchmarkDoors/nethttp/tenants=10000 | 3.00 × | ≤ 1.25 | no | 600 vs 200 ns/op, 1 allocs/op |",
		"| latency ÷ ulule-redis's, lone caller | BenchmarkHandlerLone/redis/opts=default | 1.25 × | < 1 | no | 50000 vs 40000 ns/op |",
		"| latency ÷ raw-multi-exec's, lone caller | BenchmarkHandlerLone/redis/opts=default | 1.14 × | ≤ 1.15 | yes | 50000 vs 44000 ns/op |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
}

// Output of several rounds gives each target its figure in each round
// alone, beside the figure of the rounds' medians; output of one round
// has no such column.
func TestTargetsRoundByRound(t *testing.T) {
	in := `=== RUN   TestAccuracy
--- PASS: TestAccuracy (0.61s)
# round 1 of 3
BenchmarkHandler/redis/opts=default/tenants=10000/ratelimit-2 	 100000 	 10000 ns/op 	 0 failopen 	 900 B/op 	 3 allocs/op
BenchmarkHandler/redis/opts=default/tenants=10000/raw-multi-exec-2 	 40000 	 20000 ns/op 	 1000 B/op 	 27 allocs/op
# round 2 of 3
BenchmarkHandler/redis/opts=default/tenants=10000/ratelimit-2 	 100000 	 5000 ns/op 	 0 failopen 	 900 B/op 	 3 allocs/op
BenchmarkHandler/redis/opts=default/tenants=10000/raw-multi-exec-2 	 40000 	 25000 ns/op 	 1000 B/op 	 27 allocs/op
# round 3 of 3
BenchmarkHandler/redis/opts=default/tenants=10000/raw-multi-exec-2 	 40000 	 30000 ns/op 	 1000 B/op 	 27 allocs/op
`
	out, _ := runRatios(t, in)
	for _, want := range []string{
		"| target | group | ratelimit | goal | met | detail | each round |",
		// medians: ratelimit 7500, raw 25000; round 3 lacks ratelimit
		"| throughput ÷ raw-multi-exec's, 64 callers | BenchmarkHandler/redis/opts=default/tenants=10000 | 3.33 × | ≥ 3 | yes | 7500 vs 25000 ns/op | 2.00 5.00 – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	one, _ := runRatios(t, `# round 1 of 1
BenchmarkHandler/redis/opts=default/tenants=10000/ratelimit-2 	 100000 	 10000 ns/op 	 900 B/op 	 3 allocs/op
BenchmarkHandler/redis/opts=default/tenants=10000/raw-multi-exec-2 	 40000 	 20000 ns/op 	 1000 B/op 	 27 allocs/op
`)
	if strings.Contains(one, "each round") || !strings.Contains(one, "| 2.00 × | ≥ 3 | no | 10000 vs 20000 ns/op |\n") {
		t.Errorf("one round: want the targets without a column of rounds:\n%s", one)
	}
}

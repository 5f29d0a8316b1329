// Command ratios reads `go test -bench` output on stdin and prints one
// markdown table per benchmark group: each contender's ns/op, B/op and
// allocs/op (the median over -count runs), its ratio to the group's bare app
// when there is one, and its ratio to ratelimit; then the medians of any
// other metric the benchmarks report (cmds/req, allowed/flood, ...), a
// column each, left out when it is zero throughout the group. Last comes a
// table of the targets, each figure a ratio (or, for the flood,
// Redis commands per request; for quotas in memory, allocations per
// request; for InFlight, a throughput ratio; for a TokenBucket in
// memory, allocations per decision; for a tenant hot on three replicas
// with Leases, Redis commands and microseconds per decision) taken from
// the groups of this output: the speed goals of past issues, for whoever
// works on speed (docs/benchmarks.md, for users, states none but those
// of leases). When the output holds several rounds (run.sh's "# round N
// of M" lines), each target also shows its figure in each round alone,
// which on a noisy machine moves far more than the goals' margins.
// With -svg FILE it also writes FILE, an SVG chart of the handler groups'
// throughput ratios drawn from the same results (chart.go).
//
// A benchmark's group is its name up to the last slash, its contender the
// last element: BenchmarkHandler/memory/tenants=1/ratelimit.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	reference = "bare"
	ours      = "ratelimit"
	raw       = "raw-multi-exec"
	// a middleware that writes ours's five header fields with constant
	// values and counts nothing
	headersFloor = "floor-headers"
	quotas       = "ratelimit-quotas" // ours with two quotas (BenchmarkQuotas)
	// ours with SkipFailedRequests, and ours on InFlight, a Take and a
	// Release per op (BenchmarkGiveBack)
	skipFailed = "ratelimit-skipfailed"
	inFlight   = "ratelimit-inflight"
	// ours on a TokenBucket beside ours on a fixed window
	// (BenchmarkTokenBucket)
	tokenBucket = "ratelimit-tokenbucket"
	// ours with Options.Leases beside ours without, one tenant hot on
	// three replicas (BenchmarkHotTenant)
	leases = "ratelimit-leases"
)

var procSuffix = regexp.MustCompile(`-\d+$`)

type samples struct {
	ns, bytes, allocs []float64
	extra             map[string][]float64 // by unit
}

type group struct {
	name       string
	contenders []string // in order of first appearance
	units      []string // extra metrics, in order of first appearance
	results    map[string]*samples
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the command: the tables on stdout, and with -svg the chart (see
// chart.go) drawn from the same parsed groups; it returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("ratios", flag.ContinueOnError)
	flags.SetOutput(stderr)
	svgFile := flags.String("svg", "", "also write a chart of the handler groups' throughput ratios to `FILE` (SVG)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "ratios:", err)
		return 1
	}
	groups, err := parse(bytes.NewReader(in))
	if err != nil {
		fmt.Fprintln(stderr, "ratios:", err)
		return 1
	}
	rounds, err := parseRounds(in)
	if err != nil {
		fmt.Fprintln(stderr, "ratios:", err)
		return 1
	}
	if len(groups) == 0 {
		fmt.Fprintln(stderr, "ratios: no benchmark results on stdin")
		return 1
	}
	for _, g := range groups {
		print(stdout, g)
	}
	printTargets(stdout, groups, rounds)
	if *svgFile != "" {
		if err := writeChart(*svgFile, groups, stderr); err != nil {
			fmt.Fprintln(stderr, "ratios:", err)
			return 1
		}
	}
	return 0
}

func parse(r io.Reader) ([]*group, error) {
	var groups []*group
	byName := map[string]*group{}
	sc := bufio.NewScanner(r)
	// go test prints a benchmark's name before running it and its figures
	// after: a line that the code under test logs meanwhile lands between
	// them, and the figures then start a line of their own.
	pending := ""
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") {
			pending = ""
			if len(f) < 2 || !isCount(f[1]) {
				pending = f[0]
				continue
			}
		} else if len(f) > 0 && pending != "" && isCount(f[0]) {
			f = append([]string{pending}, f...)
			pending = ""
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		slash := strings.LastIndexByte(name, '/')
		if slash < 0 {
			continue
		}
		gname, contender := name[:slash], name[slash+1:]
		g := byName[gname]
		if g == nil {
			g = &group{name: gname, results: map[string]*samples{}}
			byName[gname] = g
			groups = append(groups, g)
		}
		s := g.results[contender]
		if s == nil {
			s = &samples{extra: map[string][]float64{}}
			g.results[contender] = s
			g.contenders = append(g.contenders, contender)
		}
		// After the name and the iteration count come value-unit pairs.
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a number", f[0], f[i])
			}
			switch unit := f[i+1]; unit {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			default:
				if !slices.Contains(g.units, unit) {
					g.units = append(g.units, unit)
				}
				s.extra[unit] = append(s.extra[unit], v)
			}
		}
	}
	return groups, sc.Err()
}

// parseRounds parses each round of the output on its own: the text after
// each "# round" line that run.sh writes. It returns nil for output of
// fewer than two rounds.
func parseRounds(in []byte) ([][]*group, error) {
	var texts [][]byte
	for line := range bytes.Lines(in) {
		if bytes.HasPrefix(line, []byte("# round ")) {
			texts = append(texts, nil)
			continue
		}
		if len(texts) > 0 {
			texts[len(texts)-1] = append(texts[len(texts)-1], line...)
		}
	}
	if len(texts) < 2 {
		return nil, nil
	}
	rounds := make([][]*group, len(texts))
	for i, text := range texts {
		groups, err := parse(bytes.NewReader(text))
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", i+1, err)
		}
		rounds[i] = groups
	}
	return rounds, nil
}

// isCount reports whether s is a benchmark's iteration count.
func isCount(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Sorted(slices.Values(xs))
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// ns is c's median ns/op in g, 0 when g has none.
func (g *group) ns(c string) float64 {
	if s := g.results[c]; s != nil {
		return median(s.ns)
	}
	return 0
}

// allocs is c's median allocs/op in g, and whether it has any.
func (g *group) allocs(c string) (float64, bool) {
	if s := g.results[c]; s != nil && len(s.allocs) > 0 {
		return median(s.allocs), true
	}
	return 0, false
}

// metric is c's median of an extra metric in g, and whether it has one.
func (g *group) metric(c, unit string) (float64, bool) {
	if s := g.results[c]; s != nil && len(s.extra[unit]) > 0 {
		return median(s.extra[unit]), true
	}
	return 0, false
}

// shownUnits are g's extra metrics that some sample gives a value other
// than zero: a column of zeros (no request failed open) says nothing.
func (g *group) shownUnits() []string {
	var shown []string
	for _, u := range g.units {
		for _, s := range g.results {
			if slices.ContainsFunc(s.extra[u], func(v float64) bool { return v != 0 }) {
				shown = append(shown, u)
				break
			}
		}
	}
	return shown
}

// num formats a metric: whole numbers and those from 100 up to the unit,
// those from 1 to three decimals, smaller ones to three significant
// digits; trailing zeros are dropped.
func num(v float64) string {
	switch a := math.Abs(v); {
	case v == math.Trunc(v) || a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		s := strings.TrimRight(strconv.FormatFloat(v, 'f', 3, 64), "0")
		return strings.TrimSuffix(s, ".")
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func print(w io.Writer, g *group) {
	ref, our := g.ns(reference), g.ns(ours)
	units := g.shownUnits()

	fmt.Fprintf(w, "\n### %s\n\n", g.name)
	head := "| contender | ns/op | B/op | allocs/op |"
	rule := "|---|--:|--:|--:|"
	if ref > 0 {
		head += " ns/op ÷ bare | ns/op over bare |"
		rule += "--:|--:|"
	}
	if our > 0 {
		head += " ns/op ÷ ratelimit |"
		rule += "--:|"
	}
	for _, u := range units {
		head += " " + u + " |"
		rule += "--:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, c := range g.contenders {
		s := g.results[c]
		v := median(s.ns)
		row := fmt.Sprintf("| %s | %.0f | %.0f | %.0f |", c, v, median(s.bytes), median(s.allocs))
		if ref > 0 {
			row += fmt.Sprintf(" %.2f | %+.0f |", v/ref, v-ref)
		}
		if our > 0 {
			row += fmt.Sprintf(" %.2f |", v/our)
		}
		for _, u := range units {
			if m, ok := g.metric(c, u); ok {
				row += " " + num(m) + " |"
			} else {
				row += " – |"
			}
		}
		fmt.Fprintln(w, row)
	}
}

// A target is one of the issue's, read off the groups whose names match.
type target struct {
	what   string
	group  *regexp.Regexp
	goal   string
	format string // the figure's
	// figure computes the target's figure from a matching group, with a
	// note; ok is false when the group lacks what it needs.
	figure func(g *group) (v float64, note string, ok bool)
	met    func(v float64) bool
}

var targets = []target{
	{
		what:   "throughput ÷ raw-multi-exec's, 64 callers",
		group:  regexp.MustCompile(`^BenchmarkHandler/redis/opts=[^/]+/tenants=10000$`),
		goal:   "≥ 3",
		format: "%.2f ×",
		figure: throughput(ours, raw),
		met:    func(v float64) bool { return v >= 3 },
	},
	{
		what:   "latency ÷ raw-multi-exec's, lone caller",
		group:  regexp.MustCompile(`^BenchmarkHandlerLone/redis/opts=[^/]+$`),
		goal:   "≤ 1.15",
		format: "%.2f ×",
		figure: timeOver(ours, raw),
		met:    func(v float64) bool { return v <= 1.15 },
	},
	{
		what:   "latency ÷ raw-multi-exec's, lone caller, paired",
		group:  regexp.MustCompile(`^BenchmarkHandlerLone/redis/opts=[^/]+$`),
		goal:   "≤ 1.15",
		format: "%.2f ×",
		figure: func(g *group) (float64, string, bool) {
			v, ok := g.metric("paired", "ratelimit/raw")
			o, _ := g.metric("paired", "ratelimit-ns/req")
			r, _ := g.metric("paired", "raw-ns/req")
			return v, fmt.Sprintf("%.0f vs %.0f ns/req, alternating", o, r), ok
		},
		met: func(v float64) bool { return v <= 1.15 },
	},
	{
		what:   "latency ÷ ulule-redis's, lone caller",
		group:  regexp.MustCompile(`^BenchmarkHandlerLone/redis/opts=[^/]+$`),
		goal:   "< 1",
		format: "%.2f ×",
		figure: timeOver(ours, "ulule-redis"),
		met:    func(v float64) bool { return v < 1 },
	},
	{
		what:   "a middleware's time ÷ floor-headers', in-memory counter (Fiber's also without allocating)",
		group:  regexp.MustCompile(`^Benchmark(Handler/memory|Doors/[^/]+)/tenants=10000$`),
		goal:   "≤ 1.25",
		format: "%.2f ×",
		figure: func(g *group) (float64, string, bool) {
			o, f := g.ns(ours), g.ns(headersFloor)
			a, _ := g.allocs(ours)
			return o / f, fmt.Sprintf("%.0f vs %.0f ns/op, %.0f allocs/op", o, f, a), o > 0 && f > 0
		},
		met: func(v float64) bool { return v <= 1.25 },
	},
	{
		what:   "Redis commands per request, flood of 200 × limit",
		group:  regexp.MustCompile(`^BenchmarkFlood/redis/`),
		goal:   "≤ 0.15",
		format: "%.3g",
		figure: func(g *group) (float64, string, bool) {
			v, ok := g.metric(ours, "cmds/req")
			var notes []string
			for _, c := range g.contenders {
				if m, ok := g.metric(c, "cmds/req"); ok && c != ours {
					notes = append(notes, c+" "+num(m))
				}
			}
			return v, strings.Join(notes, ", "), ok
		},
		met: func(v float64) bool { return v <= 0.15 },
	},
	{
		what:   "a front door's time ÷ its bare app's, in-memory counter",
		group:  regexp.MustCompile(`^BenchmarkDoors/`),
		goal:   "≤ 1.6",
		format: "%.2f ×",
		figure: timeOver(ours, reference),
		met:    func(v float64) bool { return v <= 1.6 },
	},
	quotaTarget("Redis, 64 callers", `^BenchmarkQuotas/[^/]+/redis/`, 1.3),
	quotaTarget("in memory", `^BenchmarkQuotas/[^/]+/memory/`, 1.5),
	noAllocs("allocations per request with two quotas, in memory", `^BenchmarkQuotas/[^/]+/memory/`, quotas, "without quotas"),
	{
		what:   "time of a request that succeeds with SkipFailedRequests ÷ without, Redis, 64 callers",
		group:  regexp.MustCompile(`^BenchmarkGiveBack/fiber/redis/`),
		goal:   "≤ 1.05",
		format: "%.2f ×",
		figure: timeOver(skipFailed, ours),
		met:    func(v float64) bool { return v <= 1.05 },
	},
	{
		what:   "throughput of InFlight (Take and Release) ÷ a fixed window's (Take), Redis, 64 callers",
		group:  regexp.MustCompile(`^BenchmarkGiveBack/take/redis/`),
		goal:   "≥ 0.5",
		format: "%.2f ×",
		figure: throughput(inFlight, ours),
		met:    func(v float64) bool { return v >= 0.5 },
	},
	bucketTarget("Redis, 64 callers", `^BenchmarkTokenBucket/redis/`),
	bucketTarget("in memory", `^BenchmarkTokenBucket/memory/`),
	noAllocs("allocations per decision of a TokenBucket, in memory", `^BenchmarkTokenBucket/memory/`, tokenBucket, "fixed window"),
	leaseTarget("Redis commands per decision with Leases", "cmds/decision", false, "≤ 0.005", func(v float64) bool { return v <= 0.005 }),
	leaseTarget("Redis's time per decision with Leases, µs", "redis-us/decision", false, "≤ 0.05", func(v float64) bool { return v <= 0.05 }),
	leaseTarget("decisions per second with Leases ÷ without", "decisions/s", true, "≥ 3", func(v float64) bool { return v >= 3 }),
	leaseTarget("median time of a decision with Leases ÷ without", "p50-ns", true, "≤ 0.1", func(v float64) bool { return v <= 0.1 }),
}

// leaseTarget is a target of BenchmarkHotTenant, one tenant hot on three
// replicas of 64 callers each, on Redis: the median of unit with
// Options.Leases ("ratelimit-leases"), or with ratio that median ÷ the
// one without ("ratelimit").
func leaseTarget(what, unit string, ratio bool, goal string, met func(float64) bool) target {
	t := target{
		what:   what + ", one tenant hot on 3 replicas × 64 callers (" + unit + ")",
		group:  regexp.MustCompile(`^BenchmarkHotTenant/redis/`),
		goal:   goal,
		format: "%.3g",
		figure: func(g *group) (float64, string, bool) { return withAndWithout(g, unit) },
		met:    met,
	}
	if ratio {
		t.format, t.figure = "%.3g ×", metricOver(leases, ours, unit)
	}
	return t
}

// withAndWithout is a target's figure: the leases contender's median of
// unit, with ours's (without leases) in its note.
func withAndWithout(g *group, unit string) (float64, string, bool) {
	v, ok := g.metric(leases, unit)
	o, _ := g.metric(ours, unit)
	return v, "without " + num(o), ok
}

// metricOver is a target's figure: contender a's median of unit ÷ b's,
// with both in its note.
func metricOver(a, b, unit string) func(*group) (float64, string, bool) {
	return func(g *group) (float64, string, bool) {
		x, okx := g.metric(a, unit)
		y, oky := g.metric(b, unit)
		return x / y, fmt.Sprintf("%s vs %s %s", num(x), num(y), unit), okx && oky && y != 0
	}
}

// noAllocs is the target of no allocation for contender in the groups
// of pattern, whose note gives ratelimit's own allocations, labelled.
func noAllocs(what, pattern, contender, label string) target {
	return target{
		what:   what,
		group:  regexp.MustCompile(pattern),
		goal:   "0",
		format: "%.0f",
		figure: func(g *group) (float64, string, bool) {
			v, ok := g.allocs(contender)
			o, _ := g.allocs(ours)
			return v, fmt.Sprintf("%s %.0f", label, o), ok
		},
		met: func(v float64) bool { return v == 0 },
	}
}

// bucketTarget is the time of a decision on a TokenBucket ÷ that of one on
// a fixed window of the same Limit and Window, in the groups that pattern
// matches (BenchmarkTokenBucket), at most 1.1.
func bucketTarget(where, pattern string) target {
	return target{
		what:   "time of a TokenBucket's decision ÷ a fixed window's, " + where,
		group:  regexp.MustCompile(pattern),
		goal:   "≤ 1.1",
		format: "%.2f ×",
		figure: timeOver(tokenBucket, ours),
		met:    func(v float64) bool { return v <= 1.1 },
	}
}

// timeOver is a target's figure: contender a's ns/op ÷ b's, with both in
// its note.
func timeOver(a, b string) func(*group) (float64, string, bool) {
	return func(g *group) (float64, string, bool) {
		x, y := g.ns(a), g.ns(b)
		return x / y, fmt.Sprintf("%.0f vs %.0f ns/op", x, y), x > 0 && y > 0
	}
}

// throughput is a target's figure: contender a's throughput ÷ b's (b's
// ns/op ÷ a's), with both ns/op in its note.
func throughput(a, b string) func(*group) (float64, string, bool) {
	return func(g *group) (float64, string, bool) {
		x, y := g.ns(a), g.ns(b)
		return y / x, fmt.Sprintf("%.0f vs %.0f ns/op", x, y), x > 0 && y > 0
	}
}

// quotaTarget is the time of a request decided against the main limit and
// two quotas ÷ that of one decided against the main limit alone, in the
// groups that pattern matches (BenchmarkQuotas), at most goal.
func quotaTarget(where, pattern string, goal float64) target {
	return target{
		what:   "time with two quotas ÷ the main limit alone's, " + where,
		group:  regexp.MustCompile(pattern),
		goal:   fmt.Sprintf("≤ %.1f", goal),
		format: "%.2f ×",
		figure: timeOver(quotas, ours),
		met:    func(v float64) bool { return v <= goal },
	}
}

// printTargets prints the targets that the groups have figures
// for: ratelimit's figure in each matching group, the goal, and whether
// this run meets it; with rounds, also the figure in each round alone
// ("–" where a round lacks it).
func printTargets(w io.Writer, groups []*group, rounds [][]*group) {
	var rows []string
	for _, t := range targets {
		for _, g := range groups {
			if !t.group.MatchString(g.name) {
				continue
			}
			v, note, ok := t.figure(g)
			if !ok {
				continue
			}
			met := "no"
			if t.met(v) {
				met = "yes"
			}
			row := fmt.Sprintf("| %s | %s | %s | %s | %s | %s |", t.what, g.name, fmt.Sprintf(t.format, v), t.goal, met, note)
			if rounds != nil {
				var each []string
				for _, round := range rounds {
					i := slices.IndexFunc(round, func(rg *group) bool { return rg.name == g.name })
					figure := "–"
					if i >= 0 {
						if v, _, ok := t.figure(round[i]); ok {
							figure = strings.TrimSuffix(fmt.Sprintf(t.format, v), " ×")
						}
					}
					each = append(each, figure)
				}
				row += " " + strings.Join(each, " ") + " |"
			}
			rows = append(rows, row)
		}
	}
	if rows == nil {
		return
	}
	fmt.Fprintf(w, "\n### Targets: ratelimit's figures in this run\n\n")
	if rounds != nil {
		fmt.Fprintln(w, "| target | group | ratelimit | goal | met | detail | each round |")
		fmt.Fprintln(w, "|---|---|--:|--:|---|---|---|")
	} else {
		fmt.Fprintln(w, "| target | group | ratelimit | goal | met | detail |")
		fmt.Fprintln(w, "|---|---|--:|--:|---|---|")
	}
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

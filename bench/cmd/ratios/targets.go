// The targets: each one's goal and how its figure is read off the
// groups, and the table of them that ends the output.

package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

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

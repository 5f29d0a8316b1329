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
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
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

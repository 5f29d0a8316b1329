// Command ratios reads `go test -bench` output on stdin and prints one
// markdown table per benchmark group: each contender's ns/op, B/op and
// allocs/op (the median over -count runs), its ratio to the group's bare app
// when there is one, and its ratio to ratelimit.
//
// A benchmark's group is its name up to the last slash, its contender the
// last element: BenchmarkHandler/memory/tenants=1/ratelimit.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	reference = "bare"
	ours      = "ratelimit"
)

var procSuffix = regexp.MustCompile(`-\d+$`)

type samples struct{ ns, bytes, allocs []float64 }

type group struct {
	name       string
	contenders []string // in order of first appearance
	results    map[string]*samples
}

func main() {
	groups, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
	if len(groups) == 0 {
		fmt.Fprintln(os.Stderr, "ratios: no benchmark results on stdin")
		os.Exit(1)
	}
	for _, g := range groups {
		print(os.Stdout, g)
	}
}

func parse(r io.Reader) ([]*group, error) {
	var groups []*group
	byName := map[string]*group{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
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
			s = &samples{}
			g.results[contender] = s
			g.contenders = append(g.contenders, contender)
		}
		// After the name and the iteration count come value-unit pairs.
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a number", f[0], f[i])
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			}
		}
	}
	return groups, sc.Err()
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

func print(w io.Writer, g *group) {
	ns := func(c string) float64 {
		if s := g.results[c]; s != nil {
			return median(s.ns)
		}
		return 0
	}
	ref, our := ns(reference), ns(ours)

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
		fmt.Fprintln(w, row)
	}
}

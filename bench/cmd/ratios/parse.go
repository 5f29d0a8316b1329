// Parsing of `go test -bench` output into groups of samples, and the medians
// read off a group.

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

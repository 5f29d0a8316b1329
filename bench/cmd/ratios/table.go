// The markdown table of each benchmark group: its contenders' medians and
// their ratios to the bare app and to ratelimit.

package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

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

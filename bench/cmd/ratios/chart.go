package main

// The chart: one panel per handler group, a horizontal bar per contender
// giving its throughput relative to the panel's reference (the reference's
// median ns/op ÷ the contender's), longest bar on top, the value at the end
// of each bar. A plain SVG: rect, line and text, no scripts, no fonts or
// links to fetch.

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"unicode/utf8"
)

// A panel is a group to draw, the contender its bars are relative to, what
// 1.0 means, and contenders left out of it.
type panel struct {
	group, ref, title string
	leaveOut          []string
}

var panels = []panel{
	{"BenchmarkHandler/memory/tenants=1", reference,
		"In memory, 1 tenant: throughput ÷ the bare app's (bare = 1.0, higher is better)", nil},
	{"BenchmarkHandler/memory/tenants=10000", reference,
		"In memory, 10,000 tenants: throughput ÷ the bare app's (bare = 1.0, higher is better)", nil},
	{"BenchmarkHandler/redis/opts=default/tenants=1", raw,
		"Redis, 1 tenant: throughput ÷ the raw MULTI/EXEC loop's (raw-multi-exec = 1.0, higher is better)", []string{reference}},
	{"BenchmarkHandler/redis/opts=default/tenants=10000", raw,
		"Redis, 10,000 tenants: throughput ÷ the raw MULTI/EXEC loop's (raw-multi-exec = 1.0, higher is better)", []string{reference}},
}

type bar struct {
	contender string
	v         float64 // throughput ÷ the reference's
	runs      int     // ns/op samples behind the median
}

type drawn struct {
	panel
	bars []bar
}

// Colours: ratelimit, its variants (ratelimit-sliding, ...), the panel's
// reference and the floors, the peers.
const (
	colourOurs     = "#d9480f"
	colourVariant  = "#ffa94d"
	colourBaseline = "#adb5bd"
	colourPeer     = "#4c6ef5"
)

func colour(contender, ref string) string {
	switch {
	case contender == ours:
		return colourOurs
	case strings.HasPrefix(contender, ours+"-"):
		return colourVariant
	case contender == ref || strings.HasPrefix(contender, "floor-"):
		return colourBaseline
	}
	return colourPeer
}

// chartPanels are the panels whose group and reference the groups have,
// each with its bars sorted by value, highest first.
func chartPanels(groups []*group) []drawn {
	var out []drawn
	for _, p := range panels {
		i := slices.IndexFunc(groups, func(g *group) bool { return g.name == p.group })
		if i < 0 {
			continue
		}
		g := groups[i]
		ref := g.ns(p.ref)
		if ref <= 0 {
			continue
		}
		d := drawn{panel: p}
		for _, c := range g.contenders {
			if ns := g.ns(c); ns > 0 && !slices.Contains(p.leaveOut, c) {
				d.bars = append(d.bars, bar{c, ref / ns, len(g.results[c].ns)})
			}
		}
		slices.SortStableFunc(d.bars, func(a, b bar) int {
			return cmp.Or(cmp.Compare(b.v, a.v), strings.Compare(a.contender, b.contender))
		})
		out = append(out, d)
	}
	return out
}

// writeChart writes the chart to file, or, with no panel to draw, warns on
// stderr and writes nothing.
func writeChart(file string, groups []*group, stderr io.Writer) error {
	ds := chartPanels(groups)
	if len(ds) == 0 {
		fmt.Fprintf(stderr, "ratios: no BenchmarkHandler memory or redis/opts=default group with its reference in the input; %s not written\n", file)
		return nil
	}
	return os.WriteFile(file, []byte(svg(ds)), 0o644)
}

// Layout, in pixels.
const (
	width     = 960
	margin    = 20
	labelEnd  = 200 // contender names end here, right-aligned
	barStart  = 208
	barEnd    = width - margin - 70 // room for the value after the longest bar
	rowHeight = 24
	barHeight = 17
	panelHead = 52 // title and group name above the bars
	panelGap  = 28
)

func svg(ds []drawn) string {
	var b strings.Builder
	height := margin
	for _, d := range ds {
		height += panelHead + len(d.bars)*rowHeight + panelGap
	}
	height += 50 // legend
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">
<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>
`, width, height, width, height, width, height)

	runs := map[int]bool{}
	y := margin
	for _, d := range ds {
		fmt.Fprintf(&b, "<g class=\"panel\">\n")
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="15" font-weight="bold" fill="#212529">%s</text>`+"\n", margin, y+16, esc(d.title))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#868e96">%s</text>`+"\n", margin, y+34, esc(d.group))
		y += panelHead

		// The scale: the longest bar fills the width, 1.0 is marked.
		top := 1.0
		for _, r := range d.bars {
			top = math.Max(top, r.v)
		}
		x := func(v float64) float64 { return barStart + v/top*(barEnd-barStart) }
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#495057" stroke-dasharray="3,3"/>`+"\n",
			x(1), y-4, x(1), y+len(d.bars)*rowHeight)

		for _, r := range d.bars {
			runs[r.runs] = true
			end := math.Max(x(r.v), barStart+1)
			fmt.Fprintf(&b, "<g class=\"bar\">")
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#212529">%s</text>`, labelEnd, y+13, esc(r.contender))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, barStart, y, end-barStart, barHeight, colour(r.contender, d.ref))
			// The value, on white where the 1.0 line would cross it
			// (about 8 pixels a character).
			v := ratio(r.v)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%d" height="%d" fill="#ffffff"/>`, end+2, y, 8*utf8.RuneCountInString(v)+4, barHeight)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#212529">%s</text>`, end+5, y+13, v)
			fmt.Fprintf(&b, "</g>\n")
			y += rowHeight
		}
		fmt.Fprintf(&b, "</g>\n")
		y += panelGap
	}

	// The legend: the colours, then what the bars are medians of.
	lx := margin
	for _, k := range []struct{ colour, what string }{
		{colourOurs, "ratelimit"},
		{colourVariant, "ratelimit's variants"},
		{colourPeer, "peers"},
		{colourBaseline, "reference and floors"},
	} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" fill="#212529">%s</text>`+"\n",
			lx, y, k.colour, lx+17, y+11, esc(k.what))
		lx += 36 + 7*len(k.what)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#495057">%s</text>`+"\n", margin, y+32,
		esc("Each bar: the reference's ns/op ÷ the contender's, "+runsText(runs)+" of go test -bench."))
	b.WriteString("</svg>\n")
	return b.String()
}

// ratio formats a bar's value: 0.52×.
func ratio(v float64) string { return fmt.Sprintf("%.2f×", v) }

// runsText says how many runs the figures are medians of: "medians of 5
// runs", "medians of 5 to 30 runs", or "from 1 run".
func runsText(runs map[int]bool) string {
	ns := slices.Sorted(maps.Keys(runs))
	lo, hi := ns[0], ns[len(ns)-1]
	switch {
	case hi == 1:
		return "from 1 run"
	case lo == hi:
		return fmt.Sprintf("medians of %d runs", lo)
	}
	return fmt.Sprintf("medians of %d to %d runs", lo, hi)
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

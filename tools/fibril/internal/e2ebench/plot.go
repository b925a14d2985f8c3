package e2ebench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// plotColors are the series colours, one per system and mode.
var plotColors = []string{"#2b6cb0", "#68a0d8", "#c05621", "#e8a060", "#2f855a", "#805ad5"}

// LatencySVG draws publish-to-deliver latency per open-loop case: a bar
// per system and mode at the median p50 of its runs, a mark at the median
// p99, on a logarithmic axis in µs. A case a system did not sustain shows
// "not sustained" instead of a bar.
func LatencySVG(runs []Result) string {
	gs := Groups(runs)
	var cases, labels []string
	for _, g := range gs {
		if g.Case == "saturation" {
			continue
		}
		if !contains(cases, g.Case) {
			cases = append(cases, g.Case)
		}
		if !contains(labels, g.Label()) {
			labels = append(labels, g.Label())
		}
	}
	lo, hi := 10.0, 1000.0
	for _, g := range gs {
		if g.Case != "saturation" && g.Sustained() {
			hi = max(hi, g.Stat(DeliverP99).Median)
			lo = min(lo, g.Stat(DeliverP50).Median)
		}
	}
	lo = math.Pow(10, math.Floor(math.Log10(max(lo, 1))))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	const left, top, plotH, barW, gap = 70.0, 30.0, 300.0, 22.0, 30.0
	groupW := float64(len(labels))*barW + gap
	width := max(left+float64(len(cases))*groupW+20, 640)
	legendY := top + plotH + 45
	height := legendY + 20*float64(len(labels)) + 10
	y := func(us float64) float64 {
		return top + plotH - (math.Log10(max(us, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="13">Publish-to-deliver latency from the intended send time (log scale): bar p50, black mark p99</text>`+"\n", left)
	for d := lo; d <= hi*1.001; d *= 10 {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, width-20, y(d), y(d), left-6, y(d)+4, tick(d))
	}
	for ci, c := range cases {
		x0 := left + float64(ci)*groupW + gap/2
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x0+float64(len(labels))*barW/2, top+plotH+18, html.EscapeString(c))
		for li, l := range labels {
			g, ok := Find(gs, c, l)
			if !ok {
				continue
			}
			x := x0 + float64(li)*barW
			color := plotColors[li%len(plotColors)]
			if !g.Sustained() {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" transform="rotate(-90 %.1f %.1f)" fill="%s">not sustained</text>`+"\n",
					x+barW/2+4, top+plotH-4, x+barW/2+4, top+plotH-4, color)
				continue
			}
			p50, p99 := g.Stat(DeliverP50).Median, g.Stat(DeliverP99).Median
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s p50 %s µs</title></rect>`+"\n",
				x+2, y(p50), barW-4, top+plotH-y(p50), color, html.EscapeString(l), c, num(p50))
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black" stroke-width="2"><title>p99 %s µs</title></line>`+"\n",
				x+2, x+barW-2, y(p99), y(p99), num(p99))
		}
	}
	for li, l := range labels {
		ly := legendY + 20*float64(li)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			left, ly-10, plotColors[li%len(plotColors)], left+18, ly, html.EscapeString(l))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// tick labels a power of ten of microseconds.
func tick(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.0f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.0f ms", us/1e3)
	}
	return fmt.Sprintf("%.0f µs", us)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

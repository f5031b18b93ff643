package reporthtml

import (
	"fmt"
	"html/template"
	"math"
	"strings"

	"orkpipe/internal/units"
)

// pageWidth is the width, in SVG user units (CSS pixels at 100 %), every chart is laid out for.
const pageWidth = 920

// cell is one square of a heatmap.
type cell struct {
	row, col int
	fill     rgb
	label    string // drawn in the cell when it fits
	stripe   string // colour of a band along the cell's bottom (the dtype), "" none
	marked   bool   // drawn with a heavy outline (promoted, dtype changed)
	title    string // hover text
}

// legend is the colour scale under a heatmap: stops from lo to hi.
type legend struct {
	caption string
	lo, hi  float64
	colour  func(v float64) rgb
}

// heatmap draws rows x cols cells (missing ones stay empty) with row and column labels and a scale.
func heatmap(rows, cols []string, cells []cell, lg legend, label string) template.HTML {
	const left, gap = 78, 1.0
	cw := math.Min(96, math.Max(14, (pageWidth-left)/float64(max(len(cols), 1))))
	ch := 22.0
	if len(rows) > 16 {
		ch = math.Max(9, math.Min(16, 640/float64(len(rows))))
	}
	rotate := false
	for _, c := range cols {
		if float64(len(c))*6.2 > cw-4 {
			rotate = true
		}
	}
	top := 20.0
	if rotate {
		longest := 0
		for _, c := range cols {
			longest = max(longest, len(c))
		}
		top = math.Min(110, 10+float64(longest)*4.6)
	}
	gridH := float64(len(rows)) * ch
	c := newCanvas(math.Max(left+float64(len(cols))*cw, 420), top+gridH+52)
	for j, name := range cols {
		x := left + float64(j)*cw + cw/2
		if rotate {
			fmt.Fprintf(&c.b, `<text x="%s" y="%s" text-anchor="start" class="small" transform="rotate(-45 %s %s)">%s</text>`,
				num(x), num(top-4), num(x), num(top-4), esc(name))
		} else {
			c.text(x, top-6, "middle", "small", name)
		}
	}
	font := "cell"
	if ch < 14 {
		font = "tiny"
	}
	for i, name := range rows {
		c.text(left-6, top+float64(i)*ch+ch/2+3.5, "end", font, name)
	}
	for _, k := range cells {
		x, y := left+float64(k.col)*cw, top+float64(k.row)*ch
		class := ""
		if k.marked {
			class = "marked"
		}
		c.rect(x+gap/2, y+gap/2, cw-gap, ch-gap, k.fill.String(), class, k.title)
		if k.stripe != "" {
			c.rect(x+gap/2, y+ch-gap/2-math.Max(2, ch/6), cw-gap, math.Max(2, ch/6), k.stripe, "", "")
		}
		if k.label != "" && cw >= 44 && ch >= 14 {
			c.fillText(x+cw/2, y+ch/2+3, "middle", ink(k.fill), "cell", k.label)
		}
	}
	// The scale: 24 steps from lo to hi.
	ly := top + gridH + 14
	lo, hi := short(lg.lo), short(lg.hi)
	sx := left + float64(len(lo))*6.5 + 6
	const steps, sw = 24, 8.0
	for s := 0; s < steps; s++ {
		v := lg.lo + (lg.hi-lg.lo)*float64(s)/float64(steps-1)
		c.rect(sx+float64(s)*sw, ly, sw, 12, lg.colour(v).String(), "", "")
	}
	c.text(sx-4, ly+10, "end", "small", lo)
	c.text(sx+steps*sw+4, ly+10, "start", "small", hi)
	c.text(sx+steps*sw+float64(len(hi))*6.5+16, ly+10, "start", "small", lg.caption)
	return c.html(label)
}

// segment is one part of a bar (an entry of a domain).
type segment struct {
	size   int64
	colour string
	title  string
}

// bar is one horizontal bar of segments.
type bar struct {
	label    string
	segments []segment
	note     string // written right of the bar
}

// bars draws horizontal bars scaled so that full fills the track; full <= 0 scales to the longest bar.
func bars(bs []bar, full int64, label string) template.HTML {
	const left, track, rowH = 70, 520.0, 22.0
	if full <= 0 {
		for _, b := range bs {
			var s int64
			for _, g := range b.segments {
				s += g.size
			}
			full = max(full, s)
		}
	}
	c := newCanvas(pageWidth, float64(len(bs))*rowH+8)
	for i, b := range bs {
		y := 4 + float64(i)*rowH
		c.text(left-6, y+rowH/2+3, "end", "small", b.label)
		c.rect(left, y+3, track, rowH-6, "", "track", "")
		x := float64(left)
		for _, g := range b.segments {
			w := 0.0
			if full > 0 {
				w = track * float64(g.size) / float64(full)
			}
			c.rect(x, y+3, w, rowH-6, g.colour, "", g.title)
			x += w
		}
		c.text(left+track+8, y+rowH/2+3, "start", "small", b.note)
	}
	return c.html(label)
}

// interval is one value with its standard error, drawn as a point with whiskers.
type interval struct {
	label  string
	value  float64
	err    float64
	colour string
}

// marker is a vertical reference line (a gate, a baseline).
type marker struct {
	at    float64
	label string
}

// intervals draws each interval on a shared horizontal axis; lo >= hi derives the axis from the data.
func intervals(rows []interval, marks []marker, lo, hi float64, unit func(float64) string, label string) template.HTML {
	const left, right, rowH = 150.0, 40.0, 26.0
	if lo >= hi {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, r := range rows {
			lo, hi = math.Min(lo, r.value-r.err), math.Max(hi, r.value+r.err)
		}
		for _, m := range marks {
			lo, hi = math.Min(lo, m.at), math.Max(hi, m.at)
		}
		pad := (hi - lo) * 0.08
		if pad == 0 {
			pad = math.Max(math.Abs(hi)*0.05, 1e-9)
		}
		lo, hi = math.Max(0, lo-pad), hi+pad
	}
	plotW := pageWidth - left - right
	x := func(v float64) float64 { return left + plotW*(v-lo)/(hi-lo) }
	h := float64(len(rows))*rowH + 40
	c := newCanvas(pageWidth, h)
	axisY := float64(len(rows))*rowH + 8
	c.line(left, axisY, left+plotW, axisY, "axis")
	for _, t := range niceTicks(lo, hi, 6) {
		c.line(x(t), 4, x(t), axisY, "grid")
		c.text(x(t), axisY+14, "middle", "small", unit(t))
	}
	for _, m := range marks {
		c.line(x(m.at), 0, x(m.at), axisY, "gate")
		if x(m.at) > left+plotW*0.7 {
			c.text(x(m.at)-3, axisY-4, "end", "small", m.label)
		} else {
			c.text(x(m.at)+3, axisY-4, "start", "small", m.label)
		}
	}
	for i, r := range rows {
		y := 4 + float64(i)*rowH + rowH/2
		c.text(left-8, y+4, "end", "", r.label)
		c.line(x(r.value-r.err), y, x(r.value+r.err), y, "whisker")
		c.line(x(r.value-r.err), y-5, x(r.value-r.err), y+5, "whisker")
		c.line(x(r.value+r.err), y-5, x(r.value+r.err), y+5, "whisker")
		c.circle(x(r.value), y, 5, r.colour, fmt.Sprintf("%s: %s ± %s", r.label, unit(r.value), unit(r.err)))
	}
	return c.html(label)
}

// cdfSeries is one distribution of per-token KL divergence: its percentiles 0..100 and its mean.
type cdfSeries struct {
	name        string
	colour      string
	percentiles []float64
	mean        float64
}

// kldCDF draws the cumulative distributions on a logarithmic KL axis, with each mean dashed and a gate.
func kldCDF(series []cdfSeries, gate float64, label string) template.HTML {
	const left, right, top, plotH = 60.0, 30.0, 10.0, 220.0
	plotW := pageWidth - left - right
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s.percentiles {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if gate > 0 {
		hi = math.Max(hi, gate)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1e-6, 1
	}
	// Whole decades, at most 8 of them below the largest value (smaller values sit on the left edge).
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	dlo = math.Max(dlo, dhi-8)
	if dhi <= dlo {
		dhi = dlo + 1
	}
	x := func(v float64) float64 {
		if v <= 0 {
			return left
		}
		return left + plotW*(math.Min(math.Max(math.Log10(v), dlo), dhi)-dlo)/(dhi-dlo)
	}
	y := func(p float64) float64 { return top + plotH*(1-p/100) }
	c := newCanvas(pageWidth, top+plotH+58)
	for d := dlo; d <= dhi; d++ {
		c.line(x(math.Pow(10, d)), top, x(math.Pow(10, d)), top+plotH, "grid")
		c.text(x(math.Pow(10, d)), top+plotH+14, "middle", "small", fmt.Sprintf("1e%d", int(d)))
	}
	for _, p := range []float64{0, 25, 50, 75, 100} {
		c.line(left, y(p), left+plotW, y(p), "grid")
		c.text(left-6, y(p)+4, "end", "small", fmt.Sprintf("%g%%", p))
	}
	c.line(left, top+plotH, left+plotW, top+plotH, "axis")
	c.text(left+plotW/2, top+plotH+30, "middle", "small", "KL divergence per scored token (nats, log scale)")
	if gate > 0 {
		c.line(x(gate), top, x(gate), top+plotH, "gate")
		c.text(x(gate)+3, top+12, "start", "small", "gate on the mean "+short(gate))
	}
	for i, s := range series {
		pts := make([]float64, 0, 2*len(s.percentiles))
		for p, v := range s.percentiles {
			pts = append(pts, x(v), y(float64(p)))
		}
		c.polyline(pts, "cdf", s.colour)
		fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="mean" stroke="%s"><title>%s</title></line>`,
			num(x(s.mean)), num(top), num(x(s.mean)), num(top+plotH), s.colour, esc(fmt.Sprintf("%s: mean %s", s.name, short(s.mean))))
		ly := top + plotH + 46
		lx := left + float64(i)*260
		c.rect(lx, ly-9, 14, 10, s.colour, "", "")
		c.text(lx+18, ly, "start", "small", fmt.Sprintf("%s (dashed: mean %s)", s.name, short(s.mean)))
	}
	return c.html(label)
}

// sizeText is a byte count for people.
func sizeText(n int64) string { return units.FormatSize(n) }

// percentText formats a fraction as a percentage.
func percentText(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// shortDigest abbreviates "blake3:<hex>" to its algorithm and first 16 hex digits.
func shortDigest(d string) string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) <= 16 {
		return d
	}
	return alg + ":" + hex[:16] + "…"
}

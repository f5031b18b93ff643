package reporthtml

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// canvas builds one inline SVG element. Coordinates are user units of its viewBox (0 0 w h);
// numbers are written rounded to 0.01 so that the same drawing gives the same bytes.
type canvas struct {
	b    strings.Builder
	w, h float64
	tag  string // the element open() started, closed by titled()
}

func newCanvas(w, h float64) *canvas { return &canvas{w: w, h: h} }

// num formats a coordinate or size.
func num(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		x = 0
	}
	x = math.Round(x*100) / 100
	if x == 0 {
		return "0"
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// esc escapes text for an element or a quoted attribute.
func esc(s string) string { return html.EscapeString(s) }

// titled closes an element with a hover title, or as an empty element without one.
func (c *canvas) titled(title string) {
	if title == "" {
		c.b.WriteString("/>")
		return
	}
	fmt.Fprintf(&c.b, "><title>%s</title></%s>", esc(title), c.tag)
}

func (c *canvas) open(tag string) {
	c.tag = tag
	c.b.WriteString("<" + tag)
}

// rect draws a rectangle; class may be "" and title "" (no hover text).
func (c *canvas) rect(x, y, w, h float64, fill, class, title string) {
	c.open("rect")
	fmt.Fprintf(&c.b, ` x="%s" y="%s" width="%s" height="%s"`, num(x), num(y), num(max(w, 0)), num(max(h, 0)))
	if fill != "" {
		fmt.Fprintf(&c.b, ` fill="%s"`, fill)
	}
	if class != "" {
		fmt.Fprintf(&c.b, ` class="%s"`, class)
	}
	c.titled(title)
}

func (c *canvas) line(x1, y1, x2, y2 float64, class string) {
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`, num(x1), num(y1), num(x2), num(y2), class)
}

// text writes s at (x, y); anchor is start, middle or end.
func (c *canvas) text(x, y float64, anchor, class, s string) {
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" text-anchor="%s"`, num(x), num(y), anchor)
	if class != "" {
		fmt.Fprintf(&c.b, ` class="%s"`, class)
	}
	fmt.Fprintf(&c.b, `>%s</text>`, esc(s))
}

// fillText writes s in the given colour (for labels on coloured cells; a style, which the page's
// CSS for text does not override).
func (c *canvas) fillText(x, y float64, anchor, fill, class, s string) {
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" text-anchor="%s" class="%s" style="fill: %s">%s</text>`, num(x), num(y), anchor, class, fill, esc(s))
}

// polyline draws the points (x0, y0, x1, y1, ...).
func (c *canvas) polyline(pts []float64, class, stroke string) {
	var b strings.Builder
	for i := 0; i+1 < len(pts); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(pts[i]) + "," + num(pts[i+1]))
	}
	fmt.Fprintf(&c.b, `<polyline points="%s" class="%s"`, b.String(), class)
	if stroke != "" {
		fmt.Fprintf(&c.b, ` stroke="%s"`, stroke)
	}
	c.b.WriteString("/>")
}

func (c *canvas) circle(x, y, r float64, fill, title string) {
	c.open("circle")
	fmt.Fprintf(&c.b, ` cx="%s" cy="%s" r="%s" fill="%s"`, num(x), num(y), num(r), fill)
	c.titled(title)
}

// html returns the finished element. label is its accessible name.
func (c *canvas) html(label string) template.HTML {
	return template.HTML(fmt.Sprintf(`<svg viewBox="0 0 %s %s" width="%s" role="img" aria-label="%s">%s</svg>`,
		num(c.w), num(c.h), num(c.w), esc(label), c.b.String()))
}

// rgb is a colour.
type rgb struct{ r, g, b float64 }

func (c rgb) String() string {
	cl := func(v float64) int { return int(math.Round(min(max(v, 0), 255))) }
	return fmt.Sprintf("#%02x%02x%02x", cl(c.r), cl(c.g), cl(c.b))
}

// luminance is the relative luminance (0 dark .. 1 light) of c, for choosing the text colour on it.
func (c rgb) luminance() float64 { return (0.2126*c.r + 0.7152*c.g + 0.0722*c.b) / 255 }

// ink is the text colour readable on c.
func ink(c rgb) string {
	if c.luminance() < 0.5 {
		return "#ffffff"
	}
	return "#111111"
}

// ramp interpolates linearly between evenly spaced stops; t in [0, 1].
func ramp(stops []rgb, t float64) rgb {
	t = min(max(t, 0), 1)
	if math.IsNaN(t) {
		t = 0
	}
	p := t * float64(len(stops)-1)
	i := min(int(p), len(stops)-2)
	f := p - float64(i)
	a, b := stops[i], stops[i+1]
	return rgb{a.r + (b.r-a.r)*f, a.g + (b.g-a.g)*f, a.b + (b.b-a.b)*f}
}

// heat is the sequential scale of the qerr heatmaps (light = small error, dark = large).
var heat = []rgb{{255, 247, 188}, {254, 196, 79}, {236, 112, 20}, {204, 76, 2}, {102, 37, 6}}

// diverging is the scale of the qerr deltas: blue = B better, white = same, red = B worse.
var diverging = []rgb{{33, 102, 172}, {146, 197, 222}, {247, 247, 247}, {244, 165, 130}, {178, 24, 43}}

// categorical colours for dtypes and stages.
var categorical = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
	"#2f4b7c", "#8cd17d", "#d4a6c8", "#86bcb6"}

// dtypeColour is a fixed colour per dtype the pack format knows, so pages of different builds agree.
func dtypeColour(dt string) string {
	for i, d := range []string{"I4_NATIVE", "I4", "I4_ROT_A8", "I8", "I8_ROT", "F16"} {
		if d == dt {
			return categorical[i]
		}
	}
	return "#bab0ac" // grey: a dtype this build does not know
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(max(n, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// short formats a value with about 4 significant digits.
func short(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

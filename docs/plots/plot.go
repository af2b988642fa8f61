package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // registers png
	_ "gonum.org/v1/plot/vg/vgsvg" // registers svg
)

func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
}

// Okabe-Ito colours: distinguishable with the common colour-vision
// deficiencies.
var (
	green      = color.RGBA{0x00, 0x9E, 0x73, 0xFF}
	vermillion = color.RGBA{0xD5, 0x5E, 0x00, 0xFF}
	blue       = color.RGBA{0x00, 0x72, 0xB2, 0xFF}
	purple     = color.RGBA{0xCC, 0x79, 0xA7, 0xFF}
	grey       = color.RGBA{0x99, 0x99, 0x99, 0xFF}
	black      = color.RGBA{0x00, 0x00, 0x00, 0xFF}
)

// style is how one variant is drawn where several share a plot.
type style struct {
	color color.Color
	dash  []vg.Length
}

var styles = map[string]style{
	"fixed-aligned":  {vermillion, nil},
	"fixed-phased":   {purple, []vg.Length{vg.Points(6), vg.Points(3)}},
	"sliding":        {blue, nil},
	"sliding-phased": {blue, []vg.Length{vg.Points(2), vg.Points(2)}},
	"token-bucket":   {green, []vg.Length{vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}},
}

// figure is one image: its size and how to draw it.
type figure struct {
	name string // file stem under docs/algorithms/
	w, h vg.Length
	draw func(c draw.Canvas)
}

// render draws f in format ("svg" or "png") on a white background. SVG text
// names its font family; a generic fallback is added so that viewers without
// Liberation Sans use a metric-compatible sans-serif, not their default serif.
func render(f figure, format string) ([]byte, error) {
	c, err := draw.NewFormattedCanvas(f.w, f.h, format)
	if err != nil {
		return nil, err
	}
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	f.draw(dc)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if format == "svg" {
		b = bytes.ReplaceAll(b, []byte("font-family:Liberation Sans;"),
			[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
	}
	return b, nil
}

// chart is one plot being built, with the legend entries of what was added.
type chart struct {
	*plot.Plot
	legend []entry
}

// entry is one legend entry.
type entry struct {
	name  string
	thumb plot.Thumbnailer
}

// newChart returns a chart with the guide's common look: a time axis from 0
// to span in seconds, and a y label. Titles and legends are drawn by layout,
// above the plot, so that they never hide data.
func newChart(ylabel string) *chart {
	p := plot.New()
	p.X.Label.Text = "time since the first request (s)"
	p.X.Tick.Marker = ticks{major: 5, minor: 1}
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	return &chart{Plot: p}
}

// finish sets the axis ranges (after every Add, which widens them).
func (c *chart) finish(ymin, ymax float64) {
	c.X.Min, c.X.Max = 0, span.Seconds()
	c.Y.Min, c.Y.Max = ymin, ymax
}

// ticks labels every major-th value and marks every minor-th.
type ticks struct{ major, minor float64 }

// Ticks implements plot.Ticker.
func (s ticks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for v := math.Ceil(lo/s.minor) * s.minor; v <= hi+1e-9; v += s.minor {
		if v == 0 {
			v = 0 // not -0
		}
		t := plot.Tick{Value: v}
		if math.Abs(math.Remainder(v, s.major)) < 1e-9 {
			t.Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		ts = append(ts, t)
	}
	return ts
}

// vlines adds dashed vertical lines at xs from ylo to yhi, with one legend
// entry.
func (c *chart) vlines(xs []float64, ylo, yhi float64, legend string) error {
	for i, x := range xs {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: ylo}, {X: x, Y: yhi}})
		if err != nil {
			return err
		}
		l.Color = grey
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		c.Add(l)
		if i == 0 && legend != "" {
			c.legend = append(c.legend, entry{legend, l})
		}
	}
	return nil
}

// hline adds a dotted horizontal line at y across the span.
func (c *chart) hline(y float64, legend string) error {
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: span.Seconds(), Y: y}})
	if err != nil {
		return err
	}
	l.Color = black
	l.Width = vg.Points(1.2)
	l.Dashes = []vg.Length{vg.Points(1.5), vg.Points(3)}
	c.Add(l)
	c.legend = append(c.legend, entry{legend, l})
	return nil
}

// marks adds a scatter of pts with glyph g in colour col.
func (c *chart) marks(pts plotter.XYs, g draw.GlyphDrawer, col color.Color, r vg.Length, legend string) error {
	if len(pts) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.GlyphStyle = draw.GlyphStyle{Color: col, Radius: r, Shape: g}
	c.Add(s)
	if legend != "" {
		c.legend = append(c.legend, entry{legend, s})
	}
	return nil
}

// step adds a step line through pts: from each point, horizontally to the
// next point's x, then vertically. The corners are explicit (not
// plotter.PostStep) so that clipping at the axis limits stays exact.
func (c *chart) step(pts plotter.XYs, st style, width vg.Length, legend string) error {
	corners := make(plotter.XYs, 0, 2*len(pts))
	for i, p := range pts {
		if i > 0 {
			corners = append(corners, plotter.XY{X: p.X, Y: pts[i-1].Y})
		}
		corners = append(corners, p)
	}
	l, err := plotter.NewLine(corners)
	if err != nil {
		return err
	}
	l.Color = st.color
	l.Dashes = st.dash
	l.Width = width
	c.Add(l)
	if legend != "" {
		c.legend = append(c.legend, entry{legend, l})
	}
	return nil
}

// note is a text annotation on a white box, at a data point.
type note struct {
	x, y  float64
	text  string
	align text.XAlignment
}

// Plot implements plot.Plotter.
func (n note) Plot(c draw.Canvas, p *plot.Plot) {
	sty := textStyle(11)
	sty.XAlign = n.align
	sty.YAlign = draw.YCenter
	trX, trY := p.Transforms(&c)
	pt := vg.Point{X: trX(n.x), Y: trY(n.y)}
	r := sty.Rectangle(n.text)
	pad := vg.Points(2)
	box := vg.Rectangle{
		Min: vg.Point{X: pt.X + r.Min.X - pad, Y: pt.Y + r.Min.Y - pad},
		Max: vg.Point{X: pt.X + r.Max.X + pad, Y: pt.Y + r.Max.Y + pad},
	}
	c.SetColor(color.White)
	c.Fill(box.Path())
	c.FillText(sty, pt, n.text)
}

func (c *chart) note(x, y float64, s string, align text.XAlignment) {
	c.Add(note{x: x, y: y, text: s, align: align})
}

// textStyle is the guide's text in points.
func textStyle(size float64) text.Style {
	return text.Style{
		Color:   black,
		Font:    font.From(plot.DefaultFont, vg.Points(size)),
		Handler: plot.DefaultTextHandler,
	}
}

// layout draws a title, the legend entries of every chart in rows under it,
// then the charts stacked top to bottom with aligned axes.
func layout(title string, charts ...*chart) func(draw.Canvas) {
	return func(c draw.Canvas) {
		sty := textStyle(14)
		sty.XAlign = draw.XCenter
		sty.YAlign = draw.YTop
		top := c.Max.Y - vg.Points(8)
		c.FillText(sty, vg.Point{X: c.Center().X, Y: top}, title)
		top -= sty.Rectangle(title).Size().Y + vg.Points(6)

		var entries []entry
		seen := map[string]bool{}
		for _, ch := range charts {
			for _, e := range ch.legend {
				if !seen[e.name] {
					seen[e.name] = true
					entries = append(entries, e)
				}
			}
		}
		top = drawLegend(c, top, entries)

		rows := make([][]*plot.Plot, len(charts))
		for i, ch := range charts {
			rows[i] = []*plot.Plot{ch.Plot}
		}
		area := c
		area.Max.Y = top - vg.Points(4)
		tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Points(10),
			PadLeft: vg.Points(4), PadRight: vg.Points(12), PadBottom: vg.Points(4)}
		canvases := plot.Align(rows, tiles, area)
		for i := range rows {
			rows[i][0].Draw(canvases[i][0])
		}
	}
}

// drawLegend draws entries in centred rows below top and returns the y below
// them.
func drawLegend(c draw.Canvas, top vg.Length, entries []entry) vg.Length {
	sty := textStyle(11)
	sty.YAlign = draw.YCenter
	thumbW, gap, sep := vg.Points(24), vg.Points(5), vg.Points(18)
	rowH := sty.Rectangle("Mg").Size().Y + vg.Points(5)
	maxW := c.Max.X - c.Min.X - vg.Points(20)
	width := func(e entry) vg.Length { return thumbW + gap + sty.Width(e.name) }
	var rows [][]entry
	var w vg.Length
	for _, e := range entries {
		if len(rows) == 0 || w+sep+width(e) > maxW {
			rows = append(rows, nil)
			w = -sep
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], e)
		w += sep + width(e)
	}
	for _, row := range rows {
		var rw vg.Length
		for i, e := range row {
			if i > 0 {
				rw += sep
			}
			rw += width(e)
		}
		x := c.Center().X - rw/2
		y := top - rowH/2
		for _, e := range row {
			icon := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
				Min: vg.Point{X: x, Y: y - rowH/2 + vg.Points(2)},
				Max: vg.Point{X: x + thumbW, Y: y + rowH/2 - vg.Points(2)},
			}}
			e.thumb.Thumbnail(&icon)
			c.FillText(sty, vg.Point{X: x + thumbW + gap, Y: y}, e.name)
			x += width(e) + sep
		}
		top -= rowH
	}
	return top
}

// singleFigure is the single-client timeline of one variant: every request
// at its instant and its rank among the requests sent, admitted or denied,
// with the cumulative admitted count and the identity's window starts.
func singleFigure(v variant, out []outcome, phase time.Duration) (figure, error) {
	c := newChart("requests since 0 s (cumulative)")
	c.Y.Tick.Marker = ticks{major: 10, minor: 5}
	top := float64(len(out)) + 3
	var bs []float64
	for _, b := range boundaries(v, phase) {
		bs = append(bs, b.Seconds())
	}
	legend := "window start (aligned: every 10 s from 0 s)"
	if v.phased {
		legend = fmt.Sprintf("window start of %s (its phase: %s)", client, seconds(phase))
	}
	if err := c.vlines(bs, 0, top, legend); err != nil {
		return figure{}, err
	}
	// Each segment's count next to it, under the data (its white box hides
	// only the grid and the window starts): the bursts' between the sent and
	// admitted lines, right of their last request; the first burst's above
	// the sent line, where nothing is drawn yet.
	for _, s := range segments {
		a, sentN := tally(out, s)
		_, last := segmentSpan(out, s)
		sentAt, admittedAt := counts(out, last)
		x, y := last+0.4, (sentAt+admittedAt)/2
		if s == burstA {
			x, y = 0.3, sentAt+4.5
		}
		c.note(x, y, fmt.Sprintf("%d of %d admitted", a, sentN), draw.XLeft)
	}
	sent := plotter.XYs{{X: 0, Y: 0}}
	admitted := plotter.XYs{{X: 0, Y: 0}}
	var yes, no plotter.XYs
	n := 0
	for i, o := range out {
		x, y := o.at.Seconds(), float64(i+1)
		sent = append(sent, plotter.XY{X: x, Y: y})
		if o.allowed {
			n++
			yes = append(yes, plotter.XY{X: x, Y: y})
		} else {
			no = append(no, plotter.XY{X: x, Y: y})
		}
		admitted = append(admitted, plotter.XY{X: x, Y: float64(n)})
	}
	sent = append(sent, plotter.XY{X: span.Seconds(), Y: float64(len(out))})
	admitted = append(admitted, plotter.XY{X: span.Seconds(), Y: float64(n)})
	if err := c.step(sent, style{color: grey}, vg.Points(1), "sent (cumulative)"); err != nil {
		return figure{}, err
	}
	if err := c.step(admitted, style{color: blue}, vg.Points(2), "admitted (cumulative)"); err != nil {
		return figure{}, err
	}
	if err := c.marks(yes, draw.CircleGlyph{}, green, vg.Points(2.5), "request admitted"); err != nil {
		return figure{}, err
	}
	if err := c.marks(no, draw.CrossGlyph{}, vermillion, vg.Points(3), "request denied"); err != nil {
		return figure{}, err
	}
	c.finish(0, top)
	return figure{name: v.slug, w: 9 * vg.Inch, h: 4.6 * vg.Inch,
		draw: layout(v.title+", 10 per 10 s: one client's requests", c)}, nil
}

// segmentSpan returns the first and last instant (s) of segment s.
func segmentSpan(out []outcome, s segment) (first, last float64) {
	first = math.Inf(1)
	for _, o := range out {
		if o.seg == s {
			first = math.Min(first, o.at.Seconds())
			last = math.Max(last, o.at.Seconds())
		}
	}
	return first, last
}

// counts returns how many requests were sent and admitted up to and
// including at (s).
func counts(out []outcome, at float64) (sent, admitted float64) {
	for _, o := range out {
		if o.at.Seconds() <= at {
			sent++
			if o.allowed {
				admitted++
			}
		}
	}
	return sent, admitted
}

// trailing returns, as step points, how many requests were admitted in the
// trailing window (t - Window, t], sampled every 50 ms (the traffic's
// instants are multiples of 100 ms): a point where the count changes, and
// the last sample.
func trailing(out []outcome) plotter.XYs {
	var pts plotter.XYs
	for t := time.Duration(0); t <= span; t += 50 * time.Millisecond {
		n := 0
		for _, o := range out {
			if o.allowed && o.at <= t && o.at > t-window {
				n++
			}
		}
		if len(pts) == 0 || pts[len(pts)-1].Y != float64(n) || t == span {
			pts = append(pts, plotter.XY{X: t.Seconds(), Y: float64(n)})
		}
	}
	return pts
}

// comparisonFigure overlays the trailing-window admitted count of every
// variant for the single-client traffic.
func comparisonFigure(outs [][]outcome) (figure, error) {
	c := newChart("admitted in the last 10 s")
	c.Y.Tick.Marker = ticks{major: 5, minor: 1}
	if err := c.hline(quota, "Limit: 10 per 10 s"); err != nil {
		return figure{}, err
	}
	for i, v := range variants {
		if err := c.step(trailing(outs[i]), styles[v.slug], vg.Points(2), v.name); err != nil {
			return figure{}, err
		}
	}
	c.finish(0, 22)
	return figure{name: "trailing-window", w: 9 * vg.Inch, h: 4.4 * vg.Inch,
		draw: layout("Requests admitted in the trailing 10 s, same traffic, one client", c)}, nil
}

// herdFigure shows the admitted requests per second summed over the many
// clients, per variant. The y axis stops at 60 so that the steady state is
// readable; the spikes above it are labelled with their height.
func herdFigure(perSecond [][]int) (figure, error) {
	const ymax = 60
	c := newChart("admitted per second, all clients")
	c.Y.Tick.Marker = ticks{major: 10, minor: 5}
	if err := c.hline(herdClients*quota/window.Seconds(), fmt.Sprintf("%d clients × 1 per second", herdClients)); err != nil {
		return figure{}, err
	}
	for i, v := range herdVariants {
		pts := make(plotter.XYs, 0, len(perSecond[i])+1)
		for s, n := range perSecond[i] {
			pts = append(pts, plotter.XY{X: float64(s), Y: float64(n)})
		}
		pts = append(pts, plotter.XY{X: span.Seconds(), Y: float64(perSecond[i][len(perSecond[i])-1])})
		if err := c.step(pts, styles[v.slug], vg.Points(2), v.name); err != nil {
			return figure{}, err
		}
	}
	// Label each second above the axis with the variants that reach it.
	for s := range perSecond[0] {
		var who []int
		for i := range herdVariants {
			if perSecond[i][s] > ymax {
				who = append(who, perSecond[i][s])
			}
		}
		if len(who) == 0 {
			continue
		}
		label := fmt.Sprintf("↑ %d", who[0])
		if len(who) == len(herdVariants) {
			label = fmt.Sprintf("↑ %d (all four)", who[0])
		}
		c.note(float64(s)+0.15, ymax-3, label, draw.XLeft)
	}
	c.finish(0, ymax)
	return figure{name: "many-clients", w: 9 * vg.Inch, h: 4.6 * vg.Inch,
		draw: layout(fmt.Sprintf("%d clients, each sending 10 per second, 10 per 10 s each: what the service admits", herdClients), c)}, nil
}

// retryFigure stacks one panel per variant: the Retry-After each denial
// carried (whole seconds), the wait it imposed, and the admitted requests.
func retryFigure(attempts [][]attempt) (figure, error) {
	charts := make([]*chart, len(variants))
	for i, v := range variants {
		c := newChart("Retry-After (s)")
		c.Title.Text = v.name
		c.Title.TextStyle.Font.Size = vg.Points(12)
		c.Title.Padding = vg.Points(4)
		c.Y.Tick.Marker = ticks{major: 5, minor: 1}
		if i != len(variants)-1 {
			c.X.Label.Text = ""
		}
		var yes, no plotter.XYs
		for _, a := range attempts[i] {
			if a.allowed {
				yes = append(yes, plotter.XY{X: a.at.Seconds(), Y: 0})
				continue
			}
			x, y := a.at.Seconds(), float64(a.header)
			no = append(no, plotter.XY{X: x, Y: y})
			wait, err := plotter.NewLine(plotter.XYs{{X: x, Y: y}, {X: math.Min(x+y, span.Seconds()), Y: y}})
			if err != nil {
				return figure{}, err
			}
			wait.Color = vermillion
			wait.Width = vg.Points(1)
			wait.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			c.Add(wait)
			if len(no) == 1 {
				c.legend = append(c.legend, entry{"the wait it asks for, up to the retry", wait})
			}
		}
		if err := c.marks(no, draw.CrossGlyph{}, vermillion, vg.Points(3.5), "denied: the Retry-After it carries"); err != nil {
			return figure{}, err
		}
		if err := c.marks(yes, draw.CircleGlyph{}, green, vg.Points(2), "admitted"); err != nil {
			return figure{}, err
		}
		c.finish(-0.6, 10)
		charts[i] = c
	}
	return figure{name: "retry-after", w: 9 * vg.Inch, h: 8.5 * vg.Inch,
		draw: layout("Retry-After seen by a client that wants 4 per second and retries exactly when told (10 per 10 s)", charts...)}, nil
}

// seconds formats d in seconds with up to 3 decimals: "2.16 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// Package chart draws the plots of the run report and of the live status
// page with gonum/plot, as SVG to inline in an HTML page: a page that
// needs no network to open, and no script to draw.
//
// The numbers come in already computed (bins, series, bar heights) so that
// callers can check them apart from the drawing.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Wide is the width of a plot that spans the page.
const Wide = 9 * vg.Inch

// Frame is what every plot has: a title, axis labels and a size.
type Frame struct {
	Title, X, Y string
	// Width and Height default to 6 × 3 inches.
	Width, Height vg.Length
}

// Bins are a histogram's counts: Counts[i] values fell in
// [Edges[i], Edges[i+1]).
type Bins struct {
	Edges  []float64 `json:"edges"`
	Counts []int     `json:"counts"`
}

// Binned counts values into n equal bins over [lo, hi]; values outside go
// to the end bins, so that every value is counted.
func Binned(values []float64, lo, hi float64, n int) Bins {
	if n < 1 || !(hi > lo) {
		n, hi = 1, lo+1
	}
	b := Bins{Edges: make([]float64, n+1), Counts: make([]int, n)}
	width := (hi - lo) / float64(n)
	for i := range b.Edges {
		b.Edges[i] = lo + float64(i)*width
	}
	b.Edges[n] = hi
	for _, v := range values {
		i := int(math.Floor((v - lo) / width))
		b.Counts[max(0, min(n-1, i))]++
	}
	return b
}

// Total is the number of values binned.
func (b Bins) Total() int {
	n := 0
	for _, c := range b.Counts {
		n += c
	}
	return n
}

// Mark is a vertical line drawn over a histogram, such as a mean or a
// clip bound. Marks of the same Style share colour and dashes; a mark
// without a label has no legend entry.
type Mark struct {
	X     float64
	Label string
	Style int
}

// Series is one line of a line plot.
type Series struct {
	Name string
	X, Y []float64
}

// BarGroup is one bar per category, side by side with the other groups.
type BarGroup struct {
	Name   string
	Values []float64
}

// Histogram draws bins as bars, with marks as labelled vertical lines.
func Histogram(f Frame, b Bins, marks ...Mark) (template.HTML, error) {
	if len(b.Counts) == 0 || len(b.Edges) != len(b.Counts)+1 {
		return "", fmt.Errorf("histogram %q: %d edges for %d counts", f.Title, len(b.Edges), len(b.Counts))
	}
	p := newPlot(f)
	h := &plotter.Histogram{Width: b.Edges[1] - b.Edges[0], FillColor: plotutil.Color(0),
		LineStyle: draw.LineStyle{Color: color.White, Width: vg.Points(0.5)}}
	top := 1.0
	for i, c := range b.Counts {
		h.Bins = append(h.Bins, plotter.HistogramBin{Min: b.Edges[i], Max: b.Edges[i+1], Weight: float64(c)})
		top = max(top, float64(c))
	}
	p.Add(h)
	for _, m := range marks {
		l, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: 0}, {X: m.X, Y: top}})
		if err != nil {
			return "", fmt.Errorf("histogram %q: mark %q: %w", f.Title, m.Label, err)
		}
		l.Color = plotutil.Color(m.Style + 1)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(m.Style + 1)
		p.Add(l)
		if m.Label != "" {
			p.Legend.Add(m.Label, l)
		}
	}
	p.Legend.Top = true
	return render(p, f)
}

// Lines draws each series as a line with its points marked.
func Lines(f Frame, series ...Series) (template.HTML, error) {
	p := newPlot(f)
	drawn := 0
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return "", fmt.Errorf("plot %q: series %q has %d x and %d y", f.Title, s.Name, len(s.X), len(s.Y))
		}
		if len(s.X) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return "", fmt.Errorf("plot %q: %w", f.Title, err)
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		if s.Name != "" {
			p.Legend.Add(s.Name, l, pts)
		}
		drawn++
	}
	if drawn == 0 {
		return "", errors.New("plot " + f.Title + ": no points")
	}
	p.Legend.Top = true
	return render(p, f)
}

// Bars draws one group of bars per BarGroup over the categories.
func Bars(f Frame, categories []string, groups ...BarGroup) (template.HTML, error) {
	if len(categories) == 0 || len(groups) == 0 {
		return "", fmt.Errorf("bars %q: nothing to draw", f.Title)
	}
	p := newPlot(f)
	width := min(f.size().X*0.6/vg.Length(len(categories)*len(groups)), 36)
	for i, g := range groups {
		if len(g.Values) != len(categories) {
			return "", fmt.Errorf("bars %q: group %q has %d values for %d categories", f.Title, g.Name, len(g.Values), len(categories))
		}
		bc, err := plotter.NewBarChart(plotter.Values(g.Values), width)
		if err != nil {
			return "", fmt.Errorf("bars %q: %w", f.Title, err)
		}
		bc.Color = plotutil.Color(i)
		bc.LineStyle.Width = 0
		bc.Offset = (vg.Length(i) - vg.Length(len(groups)-1)/2) * width
		p.Add(bc)
		if len(groups) > 1 || g.Name != "" {
			p.Legend.Add(g.Name, bc)
		}
	}
	p.NominalX(categories...)
	p.Legend.Top = true
	return render(p, f)
}

func newPlot(f Frame) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = f.Title, f.X, f.Y
	p.Add(plotter.NewGrid())
	return p
}

func (f Frame) size() vg.Point {
	w, h := f.Width, f.Height
	if w == 0 {
		w = 6 * vg.Inch
	}
	if h == 0 {
		h = 3 * vg.Inch
	}
	return vg.Point{X: w, Y: h}
}

// render writes p as an SVG element, without the XML prologue, to inline
// in HTML.
func render(p *plot.Plot, f Frame) (template.HTML, error) {
	size := f.size()
	wt, err := p.WriterTo(size.X, size.Y, "svg")
	if err != nil {
		return "", fmt.Errorf("plot %q: %w", f.Title, err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("plot %q: %w", f.Title, err)
	}
	svg := buf.String()
	i := strings.Index(svg, "<svg")
	if i < 0 {
		return "", fmt.Errorf("plot %q: the renderer wrote no svg element", f.Title)
	}
	// The SVG is the renderer's own output from numbers, never user text
	// other than titles it escapes itself.
	return template.HTML(svg[i:]), nil
}

package chart

import (
	"slices"
	"strings"
	"testing"
)

func TestBinned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []float64
		lo, hi float64
		n      int
		edges  []float64
		counts []int
	}{
		{"inside", []float64{0, 0.5, 1, 1.5, 1.99}, 0, 2, 2, []float64{0, 1, 2}, []int{2, 3}},
		{"outside goes to the end bins", []float64{-5, 2, 7}, 0, 2, 2, []float64{0, 1, 2}, []int{1, 2}},
		{"the top edge belongs to the last bin", []float64{4}, 0, 4, 4, []float64{0, 1, 2, 3, 4}, []int{0, 0, 0, 1}},
		{"an empty range becomes one bin", []float64{3, 3}, 3, 3, 5, []float64{3, 4}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Binned(tc.values, tc.lo, tc.hi, tc.n)
			if !slices.Equal(b.Edges, tc.edges) || !slices.Equal(b.Counts, tc.counts) {
				t.Errorf("Binned = %v %v, want %v %v", b.Edges, b.Counts, tc.edges, tc.counts)
			}
			if b.Total() != len(tc.values) {
				t.Errorf("Total = %d, want %d", b.Total(), len(tc.values))
			}
		})
	}
}

// TestPlotsAreInlineSVG: each kind of plot is an <svg> element with no
// XML prologue, its title escaped, its legend entries drawn.
func TestPlotsAreInlineSVG(t *testing.T) {
	f := Frame{Title: "a <b> & c", X: "x", Y: "y"}
	hist, err := Histogram(f, Binned([]float64{1, 2, 2, 3}, 0, 4, 4), Mark{X: 2, Label: "mean"}, Mark{X: 3})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := Lines(f, Series{Name: "first", X: []float64{0, 1}, Y: []float64{1, 2}}, Series{Name: "empty"})
	if err != nil {
		t.Fatal(err)
	}
	bars, err := Bars(f, []string{"file", "module"}, BarGroup{Name: "run a", Values: []float64{1, 2}},
		BarGroup{Name: "run b", Values: []float64{2, 1}})
	if err != nil {
		t.Fatal(err)
	}
	for name, svg := range map[string]string{"histogram": string(hist), "lines": string(lines), "bars": string(bars)} {
		if !strings.HasPrefix(svg, "<svg") || strings.Contains(svg, "<?xml") {
			t.Errorf("%s: not an inline svg element: %.60q", name, svg)
		}
		if strings.Contains(svg, "a <b>") || !strings.Contains(svg, "a &lt;b&gt; &amp; c") {
			t.Errorf("%s: the title is not escaped", name)
		}
	}
	for _, want := range []string{">mean<", ">first<", ">run a<", ">run b<", ">module<"} {
		if !strings.Contains(string(hist+lines+bars), want) {
			t.Errorf("no %s text drawn", want)
		}
	}
	if strings.Contains(string(lines), ">empty<") {
		t.Error("a series without points got a legend entry")
	}
}

func TestPlotsRefuseBadInput(t *testing.T) {
	f := Frame{Title: "t"}
	if _, err := Histogram(f, Bins{Edges: []float64{0, 1}, Counts: []int{1, 2}}); err == nil {
		t.Error("histogram with mismatched edges: want an error")
	}
	if _, err := Lines(f, Series{X: []float64{1}, Y: nil}); err == nil {
		t.Error("series with mismatched x and y: want an error")
	}
	if _, err := Lines(f); err == nil {
		t.Error("lines without points: want an error")
	}
	if _, err := Bars(f, []string{"a"}, BarGroup{Values: []float64{1, 2}}); err == nil {
		t.Error("bars with more values than categories: want an error")
	}
}

package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/a2farm/a2farm/internal/chart"
)

//go:embed report.html.tmpl
var pageText string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"f3":   func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"pct":  func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) },
	"join": strings.Join,
	"add":  func(a, b int) int { return a + b },
	"mb":   func(b int64) string { return fmt.Sprintf("%.0f", float64(b)/1e6) },
	"last": func(s []TrainStep) TrainStep { return s[len(s)-1] },
}).Parse(pageText))

// Figure is one plot of the page.
type Figure struct {
	ID, Caption string
	SVG         template.HTML
}

// view is what the template reads.
type view struct {
	*Report
	Generated time.Time
	Columns   []string
	Figures   map[string][]Figure
}

// Render writes r as one self-contained HTML page: inline SVG plots, no
// scripts, nothing fetched.
func Render(w io.Writer, r *Report, generated time.Time) error {
	figs, err := Figures(r)
	if err != nil {
		return err
	}
	return page.Execute(w, view{Report: r, Generated: generated, Columns: EvalMetrics, Figures: figs})
}

// Figures draws every plot of r, by page section.
func Figures(r *Report) (map[string][]Figure, error) {
	out := map[string][]Figure{}
	var err error
	add := func(section, id, caption string, draw func() (template.HTML, error)) {
		if err != nil {
			return
		}
		var svg template.HTML
		if svg, err = draw(); err != nil {
			err = fmt.Errorf("figure %s: %w", id, err)
			return
		}
		out[section] = append(out[section], Figure{ID: id, Caption: caption, SVG: svg})
	}
	if len(r.Training) > 0 {
		add("training", "train-loss", "Weighted loss (Σ w·CE ÷ labelled tokens) per optimizer step, per adapter",
			func() (template.HTML, error) {
				var lines []chart.Series
				for _, t := range r.Training {
					s := chart.Series{Name: t.Label}
					for _, st := range t.Steps {
						s.X = append(s.X, float64(st.Step))
						s.Y = append(s.Y, st.Loss)
					}
					lines = append(lines, s)
				}
				return chart.Lines(chart.Frame{Title: "Trainer loss", X: "optimizer step", Y: "weighted loss"}, lines...)
			})
	}
	if len(r.Series) == 0 {
		return out, err
	}
	if len(r.Series) > 1 {
		add("eval", "f1-by-series", "F1@k per level, per run and iteration", func() (template.HTML, error) {
			return chart.Bars(chart.Frame{Title: "F1@k by run and iteration", Y: "F1@k"}, seriesLabels(r), evalGroups(r)...)
		})
	}
	a := r.Advantage
	add("method", "advantage", fmt.Sprintf("Action-level advantages of %d steps: mean %.3f, std %.3f", a.N, a.Mean, a.Std),
		func() (template.HTML, error) {
			return chart.Histogram(chart.Frame{Title: "Advantage", X: "advantage", Y: "steps"}, a.Bins,
				chart.Mark{X: a.Mean, Label: fmt.Sprintf("mean %.3f", a.Mean)},
				chart.Mark{X: a.Mean - a.Std, Label: fmt.Sprintf("mean ± std (%.3f)", a.Std), Style: 1},
				chart.Mark{X: a.Mean + a.Std, Style: 1})
		})
	clip := r.Settings.Clip
	add("method", "weights", fmt.Sprintf("Turn weights of %d steps, clipped to [%g, %g]", r.Weights.N, clip[0], clip[1]),
		func() (template.HTML, error) {
			return chart.Histogram(chart.Frame{Title: "Weight", X: "weight", Y: "steps"}, r.Weights.Bins,
				chart.Mark{X: clip[0], Label: fmt.Sprintf("clip bounds [%g, %g]", clip[0], clip[1])},
				chart.Mark{X: clip[1]})
		})
	add("method", "coverage", fmt.Sprintf("Share of steps whose history group has a sibling, by depth (H = %d)", r.Settings.H),
		func() (template.HTML, error) {
			var cats []string
			for k := range r.Coverage {
				cats = append(cats, fmt.Sprintf("k=%d", k))
			}
			if b := r.Branches; b != nil {
				return chart.Bars(chart.Frame{Title: "Group coverage by depth", X: "depth", Y: "share of steps"}, cats,
					chart.BarGroup{Name: "base samples alone", Values: b.BaseCoverage},
					chart.BarGroup{Name: "base + branches", Values: r.Coverage})
			}
			return chart.Bars(chart.Frame{Title: "Group coverage by depth", X: "depth", Y: "share of steps"}, cats,
				chart.BarGroup{Values: r.Coverage})
		})
	if len(r.Sweep) > 0 {
		add("method", "sweep-coverage", "H sweep: coverage at the deepest depth (k = H+1) and mean over k ≥ 1",
			func() (template.HTML, error) {
				var h, deepest, mean []float64
				for _, p := range r.Sweep {
					h = append(h, float64(p.H))
					deepest = append(deepest, p.Coverage[len(p.Coverage)-1])
					m := 0.0
					for _, c := range p.Coverage[1:] {
						m += c
					}
					mean = append(mean, m/float64(len(p.Coverage)-1))
				}
				return chart.Lines(chart.Frame{Title: "Coverage over H", X: "H", Y: "share of steps"},
					chart.Series{Name: "k = H+1", X: h, Y: deepest}, chart.Series{Name: "mean over k ≥ 1", X: h, Y: mean})
			})
		add("method", "sweep-advantage", "H sweep: advantage mean and spread", func() (template.HTML, error) {
			h := column(r.Sweep, func(p SweepPoint) float64 { return float64(p.H) })
			return chart.Lines(chart.Frame{Title: "Advantage over H", X: "H", Y: "advantage"},
				chart.Series{Name: "std", X: h, Y: column(r.Sweep, func(p SweepPoint) float64 { return p.Std })},
				chart.Series{Name: "mean", X: h, Y: column(r.Sweep, func(p SweepPoint) float64 { return p.Mean })})
		})
	}
	if len(r.Turns) > 0 {
		add("rewards", "reward-terms", "Mean reward terms by turn index", func() (template.HTML, error) {
			var cats []string
			for _, t := range r.Turns {
				cats = append(cats, fmt.Sprint(t.Turn))
			}
			return chart.Bars(chart.Frame{Title: "Reward terms by turn", X: "turn", Y: "mean reward"}, cats,
				chart.BarGroup{Name: "discovery", Values: column(r.Turns, func(t TurnReward) float64 { return t.Discovery })},
				chart.BarGroup{Name: "step cost", Values: column(r.Turns, func(t TurnReward) float64 { return t.StepCost })},
				chart.BarGroup{Name: "terminal F1", Values: column(r.Turns, func(t TurnReward) float64 { return t.Terminal })},
				chart.BarGroup{Name: "discovery–commit", Values: column(r.Turns, func(t TurnReward) float64 { return t.Commit })})
		})
		add("rewards", "returns", "Mean reward and discounted return by turn index", func() (template.HTML, error) {
			x := column(r.Turns, func(t TurnReward) float64 { return float64(t.Turn) })
			return chart.Lines(chart.Frame{Title: "Returns by turn", X: "turn", Y: "mean"},
				chart.Series{Name: "return", X: x, Y: column(r.Turns, func(t TurnReward) float64 { return t.Return })},
				chart.Series{Name: "reward", X: x, Y: column(r.Turns, func(t TurnReward) float64 { return t.Reward })})
		})
	}
	if len(r.Commit) > 0 {
		levels, gap, typeB := commitGroups(r)
		add("commit", "dc-gap", "Discovery–commit gap per level (discovery recall minus committed recall)",
			func() (template.HTML, error) {
				return chart.Bars(chart.Frame{Title: "Discovery–commit gap", X: "level", Y: "gap"}, levels, gap...)
			})
		add("commit", "type-b", "Type-B rate per level (gold seen but not answered)", func() (template.HTML, error) {
			return chart.Bars(chart.Frame{Title: "Type-B rate", X: "level", Y: "share of trajectories"}, levels, typeB...)
		})
	}
	c := r.Cost
	for _, d := range []struct {
		id, title, unit string
		dist            Distribution
	}{
		{"cost-turns", "Turns per episode", "turns", c.Turns},
		{"cost-observation", "Observation characters per episode", "characters", c.ObservationChars},
		{"cost-tokens", "Tokens per episode (prompt + completion)", "tokens", c.Tokens},
		{"cost-wall", "Wall time per episode", "seconds", c.WallSeconds},
	} {
		if d.dist.N == 0 || d.dist.Max == 0 {
			continue // nothing recorded: the heuristic policy counts no tokens
		}
		add("cost", d.id, fmt.Sprintf("%s: mean %.1f, p50 %.1f, p90 %.1f, max %.1f over %d episodes", d.title,
			d.dist.Mean, d.dist.P50, d.dist.P90, d.dist.Max, d.dist.N), func() (template.HTML, error) {
			return chart.Histogram(chart.Frame{Title: d.title, X: d.unit, Y: "episodes"}, d.dist.Bins,
				chart.Mark{X: d.dist.Mean, Label: "mean"})
		})
	}
	if len(c.ToolCalls) > 0 {
		add("cost", "cost-tools", "Tool calls per episode, by tool", func() (template.HTML, error) {
			var tools []string
			var per []float64
			for _, t := range c.ToolCalls {
				tools = append(tools, strings.ReplaceAll(t.Tool, "_", " "))
				per = append(per, t.PerTrajectory)
			}
			return chart.Bars(chart.Frame{Title: "Tool calls", Y: "calls per episode", Width: chart.Wide}, tools,
				chart.BarGroup{Values: per})
		})
	}
	if f := r.Farm; f != nil {
		if len(f.Rate) > 0 {
			add("farm", "farm-rate", fmt.Sprintf("Rollouts finished per minute, in buckets of %gs", f.BucketSeconds),
				func() (template.HTML, error) {
					var x, y []float64
					for _, p := range f.Rate {
						x, y = append(x, p.Minute), append(y, p.PerMinute)
					}
					return chart.Lines(chart.Frame{Title: "Rollouts per minute", X: "minutes since the first", Y: "rollouts/min"},
						chart.Series{X: x, Y: y})
				})
		}
		if f.GroupClose.N > 0 {
			g := f.GroupClose
			add("farm", "farm-close", fmt.Sprintf("Time from a group's last trajectory to its shard: p50 %.2fs, p90 %.2fs, max %.2fs over %d groups",
				g.P50, g.P90, g.Max, g.N), func() (template.HTML, error) {
				return chart.Histogram(chart.Frame{Title: "Time to close a group", X: "seconds", Y: "groups"}, g.Bins)
			})
		}
	}
	return out, err
}

// column takes one value of each row, for a plot's axis.
func column[T any](rows []T, value func(T) float64) []float64 {
	out := make([]float64, len(rows))
	for i, row := range rows {
		out[i] = value(row)
	}
	return out
}

func seriesLabels(r *Report) []string {
	var out []string
	for _, s := range r.Series {
		out = append(out, s.Label)
	}
	return out
}

// evalGroups are the F1@k bars: one group per level over the series.
func evalGroups(r *Report) []chart.BarGroup {
	var groups []chart.BarGroup
	index := map[string]int{}
	for _, row := range r.Eval {
		i, ok := index[row.Level]
		if !ok {
			i = len(groups)
			index[row.Level] = i
			groups = append(groups, chart.BarGroup{Name: row.Level})
		}
		groups[i].Values = append(groups[i].Values, row.Metrics["f1@k"])
	}
	return groups
}

// commitGroups are the gap and type-B bars: the levels, one group per
// series.
func commitGroups(r *Report) (levels []string, gap, typeB []chart.BarGroup) {
	seen := map[string]bool{}
	gi := map[string]int{}
	for _, row := range r.Commit {
		if !seen[row.Level] {
			seen[row.Level] = true
			levels = append(levels, row.Level)
		}
		i, ok := gi[row.Series]
		if !ok {
			i = len(gap)
			gi[row.Series] = i
			gap = append(gap, chart.BarGroup{Name: row.Series})
			typeB = append(typeB, chart.BarGroup{Name: row.Series})
		}
		gap[i].Values = append(gap[i].Values, row.Gap)
		typeB[i].Values = append(typeB[i].Values, row.TypeB)
	}
	if len(gap) == 1 {
		gap[0].Name, typeB[0].Name = "", ""
	}
	return levels, gap, typeB
}

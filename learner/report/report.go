// Package report turns runs into the numbers researchers ask of an
// A²Agent run — evaluation per level, repository and iteration; the
// advantage and weight distributions; group coverage by depth and over an
// H sweep; where reward comes from, turn by turn; the discovery–commit
// gap; what episodes cost; and for farm runs how fast rollouts came and
// groups closed — and renders them as one self-contained HTML page.
//
// Build computes every number (checked against golden files); Render only
// draws them.
package report

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/a2farm/a2farm/internal/chart"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/schema"
)

// Options are what Build needs besides the sources.
type Options struct {
	Title string
	// Learner holds the hyperparameters the labels are recomputed with.
	Learner learner.Config
	// Languages give function-level predictions their canonical ids (required).
	Languages *lang.Set
	// Gold adds to (and overrides) the gold the sources recorded.
	Gold map[string]schema.Locations
	// SweepH lists the history lengths of the H sweep (default 0..4).
	SweepH []int
}

// Report holds every number the page shows.
type Report struct {
	Title    string          `json:"title"`
	Settings Settings        `json:"settings"`
	Series   []SeriesSummary `json:"series"`
	Eval     []EvalRow       `json:"eval"`
	PerRepo  []EvalRow       `json:"per_repo"`
	// PerLanguage breaks a series down by language when it has two or
	// more (an instance counts for its first gold file's language).
	PerLanguage []EvalRow    `json:"per_language,omitempty"`
	Advantage   Distribution `json:"advantage"`
	Weights     Distribution `json:"weights"`
	// Coverage[k] is the share of steps whose depth-k history group has a
	// sibling, k = 0 (episode level) .. H+1.
	Coverage []float64 `json:"coverage"`
	// Branches compares the series' base samples alone with base +
	// branches; nil when no series has branches.
	Branches *Branches    `json:"branches,omitempty"`
	Sweep    []SweepPoint `json:"sweep"`
	Turns    []TurnReward `json:"turns"`
	Commit   []CommitRow  `json:"commit"`
	Cost     Cost         `json:"cost"`
	// Farm is set when a source is a farm run.
	Farm *Farm `json:"farm,omitempty"`
	// Training holds the trainer runs of adapter folders: loss curves.
	Training []TrainingRun `json:"training,omitempty"`
}

// Settings are the hyperparameters that shape the plots.
type Settings struct {
	H int `json:"h"`
	// Clip holds the weight bounds [w_min, w_max].
	Clip  [2]float64 `json:"weight_clip"`
	Gamma float64    `json:"gamma"`
}

// SeriesSummary is one (source, run, iteration): what it holds.
type SeriesSummary struct {
	Label        string `json:"label"`
	Kind         string `json:"kind"`
	Run          string `json:"run,omitempty"`
	Iteration    int64  `json:"iteration"`
	Trajectories int    `json:"trajectories"`
	Instances    int    `json:"instances"`
	Labeled      int    `json:"labeled"`
	InfraErrors  int    `json:"infra_errors"`
	// NoGold counts instances scored against no gold (left out).
	NoGold int `json:"no_gold"`
}

// EvalRow is one level's metrics for a series (and a repository).
type EvalRow struct {
	Series   string             `json:"series"`
	Repo     string             `json:"repo,omitempty"`
	Language string             `json:"language,omitempty"`
	Level    string             `json:"level"`
	Metrics  map[string]float64 `json:"metrics"`
}

// EvalMetrics are the columns of the evaluation tables.
var EvalMetrics = []string{"precision@k", "recall@k", "f1@k", "acc@1", "acc@3", "acc@5", "acc@10"}

// Distribution is a histogram with its summary.
type Distribution struct {
	Bins chart.Bins `json:"bins"`
	N    int        `json:"n"`
	Mean float64    `json:"mean"`
	Std  float64    `json:"std"`
	P50  float64    `json:"p50"`
	P90  float64    `json:"p90"`
	Max  float64    `json:"max"`
}

// Branches is what branch rollouts bought and cost over the series: own
// steps and tokens of base samples and branches, and coverage and
// advantage spread without and with the branches.
type Branches struct {
	Branches     int       `json:"branches"`
	BaseSteps    int       `json:"base_steps"`
	BranchSteps  int       `json:"branch_steps"`
	BaseTokens   int64     `json:"base_tokens"`
	BranchTokens int64     `json:"branch_tokens"`
	BaseCoverage []float64 `json:"base_coverage"`
	BaseStd      float64   `json:"base_advantage_std"`
	Std          float64   `json:"advantage_std"`
}

// SweepPoint is the advantage spread and coverage at one history length.
type SweepPoint struct {
	H        int       `json:"h"`
	Coverage []float64 `json:"coverage"`
	Mean     float64   `json:"mean"`
	Std      float64   `json:"std"`
}

// TurnReward is the mean of each reward term at one turn index, over the
// labelled trajectories that reached it.
type TurnReward struct {
	Turn         int     `json:"turn"`
	Trajectories int     `json:"trajectories"`
	Discovery    float64 `json:"discovery"`
	StepCost     float64 `json:"step_cost"`
	Terminal     float64 `json:"terminal"`
	Commit       float64 `json:"commit"`
	Reward       float64 `json:"reward"`
	Return       float64 `json:"return"`
}

// CommitRow is the discovery–commit gap (discovery recall minus committed
// recall) and the type-B rate (gold seen but not answered) of a level.
type CommitRow struct {
	Series string  `json:"series"`
	Level  string  `json:"level"`
	Gap    float64 `json:"gap"`
	TypeB  float64 `json:"type_b"`
}

// Cost is what episodes cost, as distributions over trajectories.
type Cost struct {
	Turns            Distribution `json:"turns"`
	ObservationChars Distribution `json:"observation_chars"`
	Tokens           Distribution `json:"tokens"`
	WallSeconds      Distribution `json:"wall_seconds"`
	// ToolCalls is the mean number of calls per trajectory, per tool.
	ToolCalls []ToolCalls `json:"tool_calls"`
}

// ToolCalls is one tool's mean calls per trajectory.
type ToolCalls struct {
	Tool          string  `json:"tool"`
	PerTrajectory float64 `json:"per_trajectory"`
}

// Farm is how a farm run went over time.
type Farm struct {
	// BucketSeconds is the width of the rate buckets.
	BucketSeconds float64     `json:"bucket_seconds"`
	Rate          []RatePoint `json:"rate"`
	// GroupClose is the time from a group's last trajectory to its shard.
	GroupClose  Distribution   `json:"group_close_seconds"`
	Groups      int            `json:"groups"`
	DeadLetters int            `json:"dead_letters"`
	DeadReasons map[string]int `json:"dead_reasons,omitempty"`
}

// RatePoint is the rollouts finished per minute in the bucket starting
// Minute minutes after the first rollout finished.
type RatePoint struct {
	Minute    float64 `json:"minute"`
	PerMinute float64 `json:"per_minute"`
}

// series is one (source, run, iteration) with its labels.
type series struct {
	summary SeriesSummary
	trs     []schema.Trajectory
	gold    map[string]schema.Locations
	result  *learner.Result
}

// Build computes the report of the sources.
func Build(sources []*Source, opts Options) (*Report, error) {
	if opts.Languages.Len() == 0 {
		return nil, errors.New("report: no language")
	}
	if len(sources) == 0 {
		return nil, errors.New("report: no runs")
	}
	if opts.SweepH == nil {
		opts.SweepH = []int{0, 1, 2, 3, 4}
	}
	adv := opts.Learner.Advantage
	r := &Report{Title: opts.Title, Settings: Settings{H: adv.H, Clip: [2]float64{adv.WMin, adv.WMax},
		Gamma: opts.Learner.Rewards.Gamma}}
	if r.Title == "" {
		var labels []string
		for _, s := range sources {
			labels = append(labels, s.Label)
		}
		r.Title = "a2farm report: " + strings.Join(labels, ", ")
	}
	var rollouts []*Source
	for _, src := range sources {
		if src.Training != nil {
			r.Training = append(r.Training, *src.Training)
			continue
		}
		rollouts = append(rollouts, src)
	}
	if len(rollouts) == 0 {
		return r, nil // adapter folders only: the training section alone
	}
	sources = rollouts
	all, err := splitSeries(sources, opts)
	if err != nil {
		return nil, err
	}
	for _, s := range all {
		if s.result, err = learner.Process(s.trs, s.gold, opts.Learner); err != nil {
			return nil, fmt.Errorf("label %s: %w", s.summary.Label, err)
		}
		for _, lt := range s.result.Trajectories {
			if lt.Skipped == "" {
				s.summary.Labeled++
			}
		}
		r.Series = append(r.Series, s.summary)
		if err := r.evaluate(s, opts.Languages); err != nil {
			return nil, err
		}
	}
	r.method(all)
	if r.Sweep, err = sweep(all, opts); err != nil {
		return nil, err
	}
	r.Cost = cost(all)
	r.Farm = farm(sources)
	return r, nil
}

// splitSeries separates each source's trajectories by run and iteration
// and attaches their gold.
func splitSeries(sources []*Source, opts Options) ([]*series, error) {
	type key struct {
		run       string
		iteration int64
	}
	var all []*series
	for _, src := range sources {
		gold := maps.Clone(src.Gold)
		maps.Copy(gold, opts.Gold)
		by := map[key][]schema.Trajectory{}
		for _, tr := range src.Trajectories {
			k := key{tr.RunID, tr.Iteration}
			by[k] = append(by[k], tr)
		}
		keys := slices.SortedFunc(maps.Keys(by), func(a, b key) int {
			return cmp.Or(cmp.Compare(a.run, b.run), cmp.Compare(a.iteration, b.iteration))
		})
		for _, k := range keys {
			trs := by[k]
			slices.SortFunc(trs, func(a, b schema.Trajectory) int {
				return cmp.Or(cmp.Compare(a.InstanceID, b.InstanceID), cmp.Compare(a.Sample, b.Sample))
			})
			label := src.Label
			if len(keys) > 1 {
				label = fmt.Sprintf("%s · %s iteration %d", src.Label, k.run, k.iteration)
			}
			s := &series{trs: trs, gold: gold, summary: SeriesSummary{Label: label, Kind: src.Kind, Run: k.run,
				Iteration: k.iteration, Trajectories: len(trs)}}
			instances := map[string]bool{}
			for _, tr := range trs {
				if !instances[tr.InstanceID] {
					instances[tr.InstanceID] = true
					if _, ok := gold[tr.InstanceID]; !ok {
						s.summary.NoGold++
					}
				}
				if tr.Status == schema.StatusInfraError {
					s.summary.InfraErrors++
				}
			}
			s.summary.Instances = len(instances)
			all = append(all, s)
		}
	}
	if len(all) == 0 {
		return nil, errors.New("report: the runs hold no trajectories")
	}
	return all, nil
}

// evaluate scores a series per level, per repository, and its
// discovery–commit gap.
func (r *Report) evaluate(s *series, l *lang.Set) error {
	var preds []schema.LocOutput
	golds := map[string]schema.Gold{}
	for _, tr := range s.trs {
		if tr.Fork.IsBranch() {
			continue // the policy is scored on its base samples
		}
		preds = append(preds, tr.LocOutput())
		if loc, ok := s.gold[tr.InstanceID]; ok {
			golds[tr.InstanceID] = goldRow(tr.InstanceID, tr.Repo, loc)
		}
	}
	rows := slices.SortedFunc(maps.Values(golds), func(a, b schema.Gold) int { return cmp.Compare(a.InstanceID, b.InstanceID) })
	rep, err := metrics.Evaluate(preds, rows, metrics.EvalOptions{Languages: l, OnlyPredicted: true})
	if err != nil {
		return fmt.Errorf("evaluate %s: %w", s.summary.Label, err)
	}
	for _, level := range metrics.Levels {
		r.Eval = append(r.Eval, EvalRow{Series: s.summary.Label, Level: level.String(), Metrics: pick(rep.Overall, level)})
		for _, repo := range rep.Repos() {
			r.PerRepo = append(r.PerRepo, EvalRow{Series: s.summary.Label, Repo: repo, Level: level.String(),
				Metrics: pick(rep.PerRepo[repo], level)})
		}
		if languages := rep.Languages(); len(languages) > 1 {
			for _, language := range languages {
				r.PerLanguage = append(r.PerLanguage, EvalRow{Series: s.summary.Label, Language: language, Level: level.String(),
					Metrics: pick(rep.PerLanguage[language], level)})
			}
		}
	}
	stats := metrics.TrajectoryStats(s.trs, rows, l)
	for _, level := range metrics.Levels {
		name := level.String()
		r.Commit = append(r.Commit, CommitRow{Series: s.summary.Label, Level: name,
			Gap: stats[name+".dc_gap"], TypeB: stats[name+".type_b_rate"]})
	}
	return nil
}

// pick takes one level's evaluation columns.
func pick(m map[string]float64, level metrics.Level) map[string]float64 {
	out := map[string]float64{}
	for _, k := range EvalMetrics {
		if v, ok := m[level.String()+"."+k]; ok {
			out[k] = v
		}
	}
	return out
}

// goldRow rebuilds a gold row from locations: every module and entity id
// starts with its file's path and a colon.
func goldRow(instance, repo string, loc schema.Locations) schema.Gold {
	g := schema.Gold{InstanceID: instance, Repo: repo, FileChanges: []schema.FileChange{}}
	files := slices.Clone(loc.Files)
	// Longest first, so that a.py does not claim the ids of a.py.bak.
	slices.SortStableFunc(files, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	index := map[string]int{}
	for _, f := range loc.Files {
		index[f] = len(g.FileChanges)
		g.FileChanges = append(g.FileChanges, schema.FileChange{File: f})
	}
	owner := func(id string) *schema.Changes {
		for _, f := range files {
			if strings.HasPrefix(id, f+":") {
				return &g.FileChanges[index[f]].Changes
			}
		}
		return nil
	}
	for _, m := range loc.Modules {
		if c := owner(m); c != nil {
			c.EditedModules = append(c.EditedModules, m)
		}
	}
	for _, e := range loc.Entities {
		if c := owner(e); c != nil {
			c.EditedEntities = append(c.EditedEntities, e)
		}
	}
	return g
}

// method fills the advantage and weight distributions, the coverage and
// the per-turn rewards, over every series.
func (r *Report) method(all []*series) {
	var advs, weights []float64
	var ds []learner.Diagnostics
	var turns []TurnReward
	for _, s := range all {
		ds = append(ds, s.result.Diagnostics)
		for _, lt := range s.result.Trajectories {
			if lt.Skipped != "" {
				continue
			}
			// A branch's replayed turns are its parent's: counted there.
			own := lt.Trajectory.OwnTurns()
			advs = append(advs, lt.Advantages[own:]...)
			weights = append(weights, lt.Weights[own:]...)
			for t, p := range lt.Labels.Parts {
				for t >= len(turns) {
					turns = append(turns, TurnReward{Turn: len(turns)})
				}
				if t < own {
					continue
				}
				tr := &turns[t]
				tr.Trajectories++
				tr.Discovery += p.Discovery
				tr.StepCost += p.StepCost
				tr.Terminal += p.Terminal
				tr.Commit += p.Commit
				tr.Reward += lt.Labels.Rewards[t]
				tr.Return += lt.Labels.Returns[t]
			}
		}
	}
	r.Advantage = distribution(advs, chart.Binned(advs, -2, 2, 32))
	r.Weights = distribution(weights, chart.Binned(weights, 0, math.Max(r.Settings.Clip[1], 1)*1.1, 33))
	r.Coverage = pooledCoverage(ds, r.Settings.H+2)
	r.Branches = branchSummary(ds, r.Settings.H+2, r.Advantage.Std)
	for i := range turns {
		t := &turns[i]
		if t.Trajectories == 0 {
			continue
		}
		n := float64(t.Trajectories)
		t.Discovery, t.StepCost, t.Terminal, t.Commit = t.Discovery/n, t.StepCost/n, t.Terminal/n, t.Commit/n
		t.Reward, t.Return = t.Reward/n, t.Return/n
	}
	r.Turns = turns
}

// sweep recomputes advantages at each history length.
func sweep(all []*series, opts Options) ([]SweepPoint, error) {
	var out []SweepPoint
	for _, h := range opts.SweepH {
		cfg := opts.Learner
		cfg.Advantage.H = h
		var advs []float64
		var ds []learner.Diagnostics
		for _, s := range all {
			res := s.result // labelled at the learner's own H already
			if h != opts.Learner.Advantage.H {
				var err error
				if res, err = learner.Process(s.trs, s.gold, cfg); err != nil {
					return nil, fmt.Errorf("H = %d: %w", h, err)
				}
			}
			for _, lt := range res.Trajectories {
				if lt.Skipped == "" {
					advs = append(advs, lt.Advantages[lt.Trajectory.OwnTurns():]...)
				}
			}
			ds = append(ds, res.Diagnostics)
		}
		d := distribution(advs, chart.Bins{})
		out = append(out, SweepPoint{H: h, Coverage: pooledCoverage(ds, h+2), Mean: d.Mean, Std: d.Std})
	}
	return out, nil
}

// branchSummary pools the series' branch diagnostics; nil without
// branches. std is the advantage spread with them.
func branchSummary(ds []learner.Diagnostics, depths int, std float64) *Branches {
	var b Branches
	var base []learner.Diagnostics
	// The base samples' pooled spread, exactly, from each series' count,
	// mean and spread: E[a²] − E[a]².
	var n, sum, sumSq float64
	pool := func(steps int, mean, sd float64) {
		w := float64(steps)
		n, sum, sumSq = n+w, sum+w*mean, sumSq+w*(sd*sd+mean*mean)
	}
	for _, d := range ds {
		bd := d.Branches
		if bd == nil {
			base = append(base, d)
			b.BaseSteps += d.Steps
			pool(d.Steps, d.AdvantageMean, d.AdvantageStd)
			continue
		}
		b.Branches += bd.Branches
		b.BaseSteps += bd.BaseSteps
		b.BranchSteps += bd.BranchSteps
		b.BaseTokens += bd.BaseTokens
		b.BranchTokens += bd.BranchTokens
		base = append(base, learner.Diagnostics{Steps: bd.BaseSteps, Coverage: bd.BaseCoverage})
		pool(bd.BaseSteps, bd.BaseAdvantageMean, bd.BaseAdvantageStd)
	}
	if b.Branches == 0 {
		return nil
	}
	b.BaseCoverage = pooledCoverage(base, depths)
	if n > 0 {
		b.BaseStd = math.Sqrt(math.Max(0, sumSq/n-(sum/n)*(sum/n)))
	}
	b.Std = std
	return &b
}

// pooledCoverage is the coverage of several series taken together: each
// series' share of steps weighted by its steps.
func pooledCoverage(ds []learner.Diagnostics, depths int) []float64 {
	covered, steps := make([]float64, depths), 0
	for _, d := range ds {
		for k, c := range d.Coverage {
			covered[k] += c * float64(d.Steps)
		}
		steps += d.Steps
	}
	if steps > 0 {
		for k := range covered {
			covered[k] /= float64(steps)
		}
	}
	return covered
}

// cost describes what the episodes of base samples cost.
func cost(all []*series) Cost {
	var turns, obs, tokens, wall []float64
	calls := map[string]float64{}
	n := 0
	for _, s := range all {
		for _, tr := range s.trs {
			if tr.Status == schema.StatusInfraError || tr.Fork.IsBranch() {
				continue // never played, or a branch: the Branches summary counts its own turns
			}
			n++
			turns = append(turns, float64(len(tr.Turns)))
			chars := 0.0
			for _, t := range tr.Turns {
				chars += float64(t.ObservationChars)
				if t.ToolName != "" {
					calls[t.ToolName]++
				}
			}
			obs = append(obs, chars)
			tokens = append(tokens, float64(tr.PromptTokens+tr.CompletionTokens))
			if !tr.StartedAt.IsZero() && tr.FinishedAt.After(tr.StartedAt) {
				wall = append(wall, tr.FinishedAt.Sub(tr.StartedAt).Seconds())
			}
		}
	}
	c := Cost{Turns: spread(turns), ObservationChars: spread(obs), Tokens: spread(tokens), WallSeconds: spread(wall)}
	for _, tool := range slices.Sorted(maps.Keys(calls)) {
		c.ToolCalls = append(c.ToolCalls, ToolCalls{Tool: tool, PerTrajectory: calls[tool] / float64(n)})
	}
	return c
}

// farm describes the farm sources over time.
func farm(sources []*Source) *Farm {
	var finished []time.Time
	f := &Farm{DeadReasons: map[string]int{}}
	var closeSeconds []float64
	isFarm := false
	for _, src := range sources {
		if src.Kind != KindFarm {
			continue
		}
		isFarm = true
		last := map[GroupClosed]time.Time{}
		for _, tr := range src.Trajectories {
			finished = append(finished, tr.FinishedAt)
			k := GroupClosed{Run: tr.RunID, Iteration: tr.Iteration, InstanceID: tr.InstanceID}
			if tr.FinishedAt.After(last[k]) {
				last[k] = tr.FinishedAt
			}
			if tr.Status == schema.StatusInfraError {
				f.DeadLetters++
				f.DeadReasons[tr.Error]++
			}
		}
		for _, g := range src.Closed {
			at := g.At
			g.At = time.Time{}
			if end, ok := last[g]; ok {
				closeSeconds = append(closeSeconds, max(0, at.Sub(end).Seconds()))
			}
		}
		f.Groups += len(src.Closed)
	}
	if !isFarm {
		return nil
	}
	f.GroupClose = spread(closeSeconds)
	f.BucketSeconds, f.Rate = rate(finished)
	return f
}

// rate buckets finish times: the narrowest of a few round widths that
// keeps the run within 40 buckets.
func rate(finished []time.Time) (float64, []RatePoint) {
	if len(finished) == 0 {
		return 0, nil
	}
	slices.SortFunc(finished, time.Time.Compare)
	span := finished[len(finished)-1].Sub(finished[0])
	widths := []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
		5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour, 6 * time.Hour}
	width := widths[len(widths)-1]
	for _, w := range widths {
		if span/w < 40 {
			width = w
			break
		}
	}
	points := make([]RatePoint, int(span/width)+1)
	for i := range points {
		points[i].Minute = (time.Duration(i) * width).Minutes()
	}
	for _, t := range finished {
		points[int(t.Sub(finished[0])/width)].PerMinute++
	}
	for i := range points {
		points[i].PerMinute /= width.Minutes()
	}
	return width.Seconds(), points
}

// spread is a distribution over 20 bins from the least to the greatest
// value.
func spread(values []float64) Distribution {
	if len(values) == 0 {
		return Distribution{}
	}
	lo, hi := slices.Min(values), slices.Max(values)
	if hi == lo {
		hi = lo + 1
	}
	return distribution(values, chart.Binned(values, lo, hi, 20))
}

// distribution summarises values binned as b.
func distribution(values []float64, b chart.Bins) Distribution {
	d := Distribution{Bins: b, N: len(values)}
	if len(values) == 0 {
		return d
	}
	sorted := slices.Sorted(slices.Values(values))
	for _, v := range values {
		d.Mean += v
	}
	d.Mean /= float64(len(values))
	for _, v := range values {
		d.Std += (v - d.Mean) * (v - d.Mean)
	}
	d.Std = math.Sqrt(d.Std / float64(len(values)))
	d.P50, d.P90, d.Max = quantile(sorted, 0.5), quantile(sorted, 0.9), sorted[len(sorted)-1]
	return d
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}

package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
)

// replayOptions are replay's flags.
type replayOptions struct {
	archive                string
	run, instance          string
	iteration              int64
	iterationSet           bool
	gold                   goldFlags
	out, labelsPath, sweep string
	maxRows                int
	sft                    bool
	learn                  learnFlags
}

func newReplayCmd(e *env) *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay --archive DIR --gold GT.jsonl --out SHARDS",
		Short: "Recompute rewards, advantages and training shards from archived trajectories",
		Long: `replay reads a trajectory archive — the learner's archive tree (its --out folder or
archive/ in it: RUN/ITERATION/INSTANCE/), any run or iteration folder of that tree, or the
flat trajectories/ folder localize writes — narrowed by --run, --iteration and --instance,
labels every turn with discovery rewards, pools trajectories per (iteration, instance), computes
history-grouped advantages and weights with the given hyperparameters, and writes Parquet
shards with a manifest — no new rollouts. Infrastructure failures are left out of every
group. --labels writes per-turn and per-trajectory labels as JSON lines; --sweep-H prints
group coverage and advantage statistics for several history lengths.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.iterationSet = cmd.Flags().Changed("iteration")
			return runReplay(cmd.Context(), e, &o)
		},
	}
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.archive, "archive", "", "trajectories: a learner's archive tree (or its --out folder) or a folder of *.arrow files")
	f.StringVar(&o.run, "run", "", "replay only this run's trajectories")
	f.Int64Var(&o.iteration, "iteration", 0, "replay only this iteration's trajectories (default: every iteration)")
	f.StringVar(&o.instance, "instance", "", "replay only this instance's trajectories")
	o.gold.bind(cmd)
	f.StringVar(&o.out, "out", "", "shard folder to write")
	f.StringVar(&o.labelsPath, "labels", "", "write per-turn and per-trajectory labels as JSON lines")
	f.StringVar(&o.sweep, "sweep-H", "", "comma-separated history lengths to compare, e.g. 0,1,2,3,4")
	f.IntVar(&o.maxRows, "shard-rows", 2000, "rows per shard file")
	f.BoolVar(&o.sft, "sft", false, "write supervised warm-up shards: per instance the best teacher trajectory matching the gold at every level, weight 1")
	o.learn.bind(cmd, e)
	return cmd
}

// runReplay labels an archive and writes what the flags ask for: the
// H sweep, labels, shards.
func runReplay(ctx context.Context, e *env, o *replayOptions) error {
	switch {
	case o.archive == "":
		return usagef("--archive is required")
	case !o.gold.given():
		return usagef("--gold (or --dataset with --repos) is required: replay labels the trajectories against the gold")
	case o.out == "" && o.labelsPath == "" && o.sweep == "":
		return usagef("--out is required (or --labels, or --sweep-H): what replay should write")
	}
	if err := inputs("archive", o.archive); err != nil {
		return err
	}
	cfg, err := o.learn.config()
	if err != nil {
		return err
	}
	hs, err := parseSweep(o.sweep)
	if err != nil {
		return err
	}
	filter := learner.ArchiveFilter{Run: o.run, Instance: o.instance}
	if o.iterationSet {
		if o.iteration < 0 {
			return usagef("--iteration %d: iterations count from 0", o.iteration)
		}
		filter.Iteration = &o.iteration
	}
	trs, err := learner.ReadArchive(o.archive, filter)
	if err != nil {
		return err
	}
	if picked := filter.String(); picked != "" {
		fmt.Fprintf(e.stdout, "%d trajectories of %s picked by %s\n", len(trs), o.archive, picked)
	}
	gold, err := o.gold.load(ctx, e)
	if err != nil {
		return err
	}
	if len(hs) > 0 {
		rows, err := learner.SweepH(trs, gold, cfg, hs)
		if err != nil {
			return err
		}
		printSweep(e, rows)
	}
	res, err := learner.Process(trs, gold, cfg)
	if err != nil {
		return err
	}
	printDiagnostics(e, res.Diagnostics)
	if o.labelsPath != "" {
		if err := atomicfile.Write(o.labelsPath, func(w io.Writer) error { return learner.WriteLabels(w, res) }); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	m, kept, err := learner.WriteShards(res, cfg, learner.ShardConfig{Dir: o.out, MaxRows: o.maxRows, SFT: o.sft,
		Source: map[string]any{"archive": o.archive, "gold_file": o.gold.path, "dataset": o.gold.dataset, "code_version": version()}})
	if err != nil {
		return err
	}
	dropped := ""
	if left := len(trs) - kept; left > 0 && o.sft {
		dropped = fmt.Sprintf("; %d left out: not the best teacher trajectory of their instance", left)
	} else if left > 0 {
		dropped = fmt.Sprintf("; %d left out by the trainer filter: no gold file surfaced, or fewer than three messages (--keep-unsuccessful keeps them)", left)
	}
	fmt.Fprintf(e.stdout, "%d of %d trajectories written to %d shard files (%d rows) in %s%s\n", kept, len(trs), len(m.Files), m.Rows, o.out, dropped)
	if m.TokenNote != "" {
		fmt.Fprintf(e.stdout, "token shards: none — %s\n", m.TokenNote)
	} else {
		fmt.Fprintf(e.stdout, "token shards: %d files, %d sequences, %d tokens (%d weighted), merge rate %.3f\n",
			len(m.TokenFiles), m.Tokens.Sequences, m.Tokens.Tokens, m.Tokens.WeightedTokens, m.Tokens.MergeRate)
	}
	return nil
}

// parseSweep reads --sweep-H's comma-separated history lengths.
func parseSweep(sweep string) ([]int, error) {
	if sweep == "" {
		return nil, nil
	}
	var hs []int
	for _, f := range strings.Split(sweep, ",") {
		h, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || h < 0 {
			return nil, usagef("--sweep-H %q: want comma-separated non-negative integers", sweep)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func printSweep(e *env, rows []learner.SweepRow) {
	fmt.Fprintln(e.stdout, "H  steps          coverage by depth (k=0 episode, 1..H+1)            advantage mean / std")
	line := func(h int, who string, coverage []float64, mean, std float64) {
		fmt.Fprintf(e.stdout, "%-2d %-14s %-48s %+.4f / %.4f\n", h, who, coverages(coverage), mean, std)
	}
	for _, r := range rows {
		if r.Base == nil {
			line(r.H, "all", r.Coverage, r.Mean, r.Std)
			continue
		}
		line(r.H, "base only", r.Base.Coverage, r.Base.Mean, r.Base.Std)
		line(r.H, "base+branches", r.Coverage, r.Mean, r.Std)
	}
}

func coverages(cs []float64) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%.3f", c))
	}
	return strings.Join(out, " ")
}

func printDiagnostics(e *env, d learner.Diagnostics) {
	fmt.Fprintf(e.stdout, "%d trajectories, %d labelled, %d steps\n", d.Trajectories, d.Labeled, d.Steps)
	fmt.Fprintf(e.stdout, "advantage mean %+.4f std %.4f; file discovery-commit gap %.4f\n", d.AdvantageMean, d.AdvantageStd, d.DCGapFile)
	var cov []string
	for k, c := range d.Coverage {
		cov = append(cov, fmt.Sprintf("k=%d %.3f", k, c))
	}
	fmt.Fprintf(e.stdout, "group coverage: %s\n", strings.Join(cov, ", "))
	if b := d.Branches; b != nil {
		var base []string
		for k, c := range b.BaseCoverage {
			base = append(base, fmt.Sprintf("k=%d %.3f", k, c))
		}
		fmt.Fprintf(e.stdout, "branches: %d played %d turns of their own (%.2fx the base samples' %d) and %d tokens (base %d)\n",
			b.Branches, b.BranchSteps, float64(b.BaseSteps+b.BranchSteps)/float64(max(b.BaseSteps, 1)), b.BaseSteps, b.BranchTokens, b.BaseTokens)
		fmt.Fprintf(e.stdout, "base samples alone: group coverage %s; advantage mean %+.4f std %.4f\n",
			strings.Join(base, ", "), b.BaseAdvantageMean, b.BaseAdvantageStd)
	}
	fmt.Fprintf(e.stdout, "advantage histogram [-2,2] by 0.25: %v\nweight histogram [0,3] by 0.25: %v\n", d.AdvantageHistogram, d.WeightHistogram)
}

// extractGold runs the gold extraction on a dataset, as a2farm gold does.
func extractGold(ctx context.Context, e *env, datasetPath, reposDir string) ([]schema.Gold, error) {
	if reposDir == "" {
		return nil, usagef("--dataset needs --repos")
	}
	cfg, err := e.goldConfig(datasetPath, reposDir)
	if err != nil {
		return nil, err
	}
	report, err := coordinator.RunGold(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return report.Golds(), nil
}

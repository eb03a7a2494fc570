package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
)

func newReplayCmd(e *env) *cobra.Command {
	cfg := learner.DefaultConfig()
	cfg.Rewards.Language = e.language
	var archive, goldPath, out, labelsPath, sweep, datasetPath, reposDir string
	var maxRows int
	var sft bool
	cmd := &cobra.Command{
		Use:   "replay --archive DIR --gold GT.jsonl --out SHARDS",
		Short: "Recompute rewards, advantages and training shards from archived trajectories",
		Long: `replay reads a trajectory archive (the trajectories/ folder localize writes), labels
every turn with discovery rewards, pools trajectories per (iteration, instance), computes
history-grouped advantages and weights with the given hyperparameters, and writes Parquet
shards with a manifest — no new rollouts. Infrastructure failures are left out of every
group. --labels writes per-turn and per-trajectory labels as JSON lines; --sweep-H prints
group coverage and advantage statistics for several history lengths.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if archive == "" || (goldPath == "") == (datasetPath == "") || (out == "" && labelsPath == "" && sweep == "") {
				return usagef("--archive, one of --gold or --dataset (with --repos), and one of --out, --labels or --sweep-H are required")
			}
			if err := cfg.Rewards.Validate(); err != nil {
				return &usageError{err}
			}
			if err := cfg.Advantage.Validate(); err != nil {
				return &usageError{err}
			}
			trs, err := schema.ReadTrajectoryDir(archive)
			if err != nil {
				return err
			}
			var golds []schema.Gold
			if goldPath != "" {
				golds, err = readFile(goldPath, schema.ReadGold)
			} else {
				golds, err = extractGold(cmd.Context(), e, datasetPath, reposDir)
			}
			if err != nil {
				return err
			}
			gold := map[string]schema.Locations{}
			for _, g := range golds {
				if g.FileChanges != nil {
					gold[g.InstanceID] = g.Locations()
				}
			}
			if sweep != "" {
				var hs []int
				for _, f := range strings.Split(sweep, ",") {
					h, err := strconv.Atoi(strings.TrimSpace(f))
					if err != nil || h < 0 {
						return usagef("--sweep-H %q: want comma-separated non-negative integers", sweep)
					}
					hs = append(hs, h)
				}
				rows, err := learner.SweepH(trs, gold, cfg, hs)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, "H  coverage by depth (k=0 episode, 1..H+1)            advantage mean / std")
				for _, r := range rows {
					var cov []string
					for _, c := range r.Coverage {
						cov = append(cov, fmt.Sprintf("%.3f", c))
					}
					fmt.Fprintf(e.stdout, "%-2d %-48s %+.4f / %.4f\n", r.H, strings.Join(cov, " "), r.Mean, r.Std)
				}
			}
			res, err := learner.Process(trs, gold, cfg)
			if err != nil {
				return err
			}
			printDiagnostics(e, res.Diagnostics)
			if labelsPath != "" {
				if err := atomicfile.Write(labelsPath, func(w io.Writer) error { return learner.WriteLabels(w, res) }); err != nil {
					return err
				}
			}
			if out == "" {
				return nil
			}
			m, kept, err := learner.WriteShards(res, cfg, learner.ShardConfig{Dir: out, MaxRows: maxRows, SFT: sft,
				Source: map[string]any{"archive": archive, "gold": goldPath, "dataset": datasetPath, "code_version": version()}})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%d of %d trajectories written to %d shard files (%d rows) in %s\n", kept, len(trs), len(m.Files), m.Rows, out)
			if m.TokenNote != "" {
				fmt.Fprintf(e.stdout, "token shards: none — %s\n", m.TokenNote)
			} else {
				fmt.Fprintf(e.stdout, "token shards: %d files, %d sequences, %d tokens (%d weighted), merge rate %.3f\n",
					len(m.TokenFiles), m.Tokens.Sequences, m.Tokens.Tokens, m.Tokens.WeightedTokens, m.Tokens.MergeRate)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&archive, "archive", "", "trajectories folder (*.arrow)")
	f.StringVar(&goldPath, "gold", "", "gt_location.jsonl")
	f.StringVar(&datasetPath, "dataset", "", "instead of --gold: extract gold from this dataset's patches (needs --repos)")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories for --dataset (env A2FARM_REPOS)")
	f.StringVar(&out, "out", "", "shard folder to write")
	f.StringVar(&labelsPath, "labels", "", "write per-turn and per-trajectory labels as JSON lines")
	f.StringVar(&sweep, "sweep-H", "", "comma-separated history lengths to compare, e.g. 0,1,2,3,4")
	f.IntVar(&maxRows, "shard-rows", 2000, "rows per shard file")
	f.IntVar(&cfg.Advantage.H, "H", cfg.Advantage.H, "history length (depths 1..H+1)")
	f.StringVar(&cfg.Advantage.Scheme, "scheme", cfg.Advantage.Scheme, "history keys: state or state_action")
	f.StringVar(&cfg.Advantage.Norm, "mode", cfg.Advantage.Norm, "group normalisation: mean_norm or mean_std_norm")
	f.Float64Var(&cfg.Advantage.DepthAlpha, "depth-alpha", cfg.Advantage.DepthAlpha, "depth weight exponent: (k+1)^alpha")
	f.Float64Var(&cfg.Advantage.Beta, "beta", cfg.Advantage.Beta, "weight = exp(beta * clip(A, -kappa, kappa))")
	f.Float64Var(&cfg.Advantage.Kappa, "kappa", cfg.Advantage.Kappa, "advantage clip")
	f.Float64Var(&cfg.Rewards.Gamma, "gamma", cfg.Rewards.Gamma, "discount")
	f.Float64Var(&cfg.Rewards.StepCost, "step-cost", cfg.Rewards.StepCost, "cost per step")
	f.Float64Var(&cfg.Rewards.AlphaFile, "alpha-file", cfg.Rewards.AlphaFile, "file-level weight")
	f.Float64Var(&cfg.Rewards.AlphaModule, "alpha-module", cfg.Rewards.AlphaModule, "module-level weight")
	f.Float64Var(&cfg.Rewards.AlphaEntity, "alpha-entity", cfg.Rewards.AlphaEntity, "entity-level weight")
	f.Float64Var(&cfg.Rewards.Commitment, "commitment", cfg.Rewards.Commitment, "discovery-commit weight (lambda)")
	f.Float64Var(&cfg.Rewards.F1Scale, "f1-scale", cfg.Rewards.F1Scale, "terminal F1 scale")
	f.StringVar(&cfg.Rewards.Discovery, "discovery", cfg.Rewards.Discovery, "surfaced (what tools returned) or reference (mentions anywhere)")
	f.BoolVar(&cfg.Rewards.TerminalOnly, "terminal-only", false, "reward only the last step (F1 term)")
	f.BoolVar(&cfg.KeepUnsuccessful, "keep-unsuccessful", false, "turn off the trainer filter (trajectories that never surfaced a gold file)")
	f.BoolVar(&sft, "sft", false, "write supervised warm-up shards: per instance the best teacher trajectory matching the gold at every level, weight 1")
	return cmd
}

func printDiagnostics(e *env, d learner.Diagnostics) {
	fmt.Fprintf(e.stdout, "%d trajectories, %d labelled, %d steps\n", d.Trajectories, d.Labeled, d.Steps)
	fmt.Fprintf(e.stdout, "advantage mean %+.4f std %.4f; file discovery-commit gap %.4f\n", d.AdvantageMean, d.AdvantageStd, d.DCGapFile)
	var cov []string
	for k, c := range d.Coverage {
		cov = append(cov, fmt.Sprintf("k=%d %.3f", k, c))
	}
	fmt.Fprintf(e.stdout, "group coverage: %s\n", strings.Join(cov, ", "))
	fmt.Fprintf(e.stdout, "advantage histogram [-2,2] by 0.25: %v\nweight histogram [0,3] by 0.25: %v\n", d.AdvantageHistogram, d.WeightHistogram)
}

// extractGold runs the gold extraction on a dataset, as a2farm gold does.
func extractGold(ctx context.Context, e *env, datasetPath, reposDir string) ([]schema.Gold, error) {
	if reposDir == "" {
		return nil, usagef("--dataset needs --repos")
	}
	report, err := coordinator.RunGold(ctx, coordinator.GoldConfig{Dataset: datasetPath, ReposDir: reposDir,
		Language: e.language, MaxEditFiles: gold.DefaultMaxEditFiles, Log: e.log})
	if err != nil {
		return nil, err
	}
	golds := make([]schema.Gold, len(report.Rows))
	for i, r := range report.Rows {
		golds[i] = r.Gold
	}
	return golds, nil
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/schema"
)

func newEvalCmd(e *env) *cobra.Command {
	var predPath, goldPath, jsonOut, trajDir string
	var opts metrics.EvalOptions
	cmd := &cobra.Command{
		Use:   "eval --predictions loc_outputs.jsonl --gold gt_location.jsonl [--json OUT]",
		Short: "Score localization predictions against gold locations",
		Long: `eval scores predictions at the file, module and function levels:
precision@k, recall@k and f1@k with the reference's fixed k (5/10/10) as the
precision denominator; precision, recall and f1 over all predictions; acc@1/3/5/10,
ndcg@k and map@k. acc@k is the reference's: 1 when the first k predictions hold
min(|gold|, k) gold ids — so it is not monotone in k (an instance with three gold
files scores acc@1 = 1 for one right first guess but needs all three for acc@3).
Function-level predictions lose a trailing ".__init__". Instances
with null gold are skipped, and a level is skipped where the gold is empty. With
several samples per instance, each sample is scored and the results averaged. Gold
instances without a prediction score 0, as in the reference protocol, unless
--only-predicted. --json writes one flat object with "<level>.<metric>" keys.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := required("predictions", predPath, "gold", goldPath); err != nil {
				return err
			}
			if err := inputs("predictions", predPath, "gold", goldPath); err != nil {
				return err
			}
			preds, err := readFile(predPath, schema.ReadLocOutputs)
			if err != nil {
				return err
			}
			golds, err := readFile(goldPath, schema.ReadGold)
			if err != nil {
				return err
			}
			opts.Languages = e.languages
			rep, err := metrics.Evaluate(preds, golds, opts)
			if err != nil {
				return err
			}
			if rep.Instances == 0 {
				return fmt.Errorf("no instance of %s has gold locations to score", goldPath)
			}
			if rep.Missing > 0 {
				e.log.Warn().Int("missing", rep.Missing).Msg("(instance, sample) pairs without a prediction score 0; --only-predicted skips instances never predicted")
			}
			if trajDir != "" {
				trs, err := schema.ReadTrajectoryDir(trajDir)
				if err != nil {
					return err
				}
				for k, v := range metrics.TrajectoryStats(trs, golds, e.languages) {
					rep.Overall[k] = v
				}
			}
			printReport(e, rep)
			if jsonOut == "" {
				return nil
			}
			flat := map[string]any{"instances": rep.Instances, "samples": rep.Samples}
			for k, v := range rep.Overall {
				flat[k] = v
			}
			data, err := json.MarshalIndent(flat, "", "  ")
			if err != nil {
				return err
			}
			return os.WriteFile(jsonOut, append(data, '\n'), 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&predPath, "predictions", "", "loc_outputs.jsonl (one row per instance and sample, or the reference's nested lists)")
	f.StringVar(&goldPath, "gold", "", "gt_location.jsonl")
	f.StringVar(&jsonOut, "json", "", "write the numbers as one flat JSON object")
	f.BoolVar(&opts.OnlyPredicted, "only-predicted", false, "skip gold instances that have no prediction")
	f.StringVar(&trajDir, "trajectories", "", "trajectories folder (from localize): adds dc_gap, type_b_rate and per-episode cost")
	return cmd
}

func readFile[T any](path string, read func(r io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

func printReport(e *env, rep *metrics.Report) {
	fmt.Fprintf(e.stdout, "%d instances × %d samples\n", rep.Instances, rep.Samples)
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\tfile\tmodule\tfunction\t")
	for _, m := range metrics.MetricKeys() {
		fmt.Fprintf(tw, "%s\t", m)
		for _, l := range metrics.Levels {
			if v, ok := rep.Overall[l.String()+"."+m]; ok {
				fmt.Fprintf(tw, "%.4f\t", v)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	printTrajectoryStats(e, rep)
	printBreakdown(e, "repository", "repo", rep.Repos(), rep.PerRepo)
	printBreakdown(e, "language", "language", rep.Languages(), rep.PerLanguage)
}

// printBreakdown prints recall@k / f1@k per level for each key, when
// there are at least two.
func printBreakdown(e *env, title, column string, keys []string, scores map[string]map[string]float64) {
	if len(keys) < 2 {
		return
	}
	fmt.Fprintf(e.stdout, "\nper %s (recall@k / f1@k)\n", title)
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tfile\tmodule\tfunction\t\n", column)
	for _, key := range keys {
		fmt.Fprintf(tw, "%s\t", key)
		for _, l := range metrics.Levels {
			r := scores[key]
			if _, ok := r[l.String()+".recall@k"]; !ok {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%.3f / %.3f\t", r[l.String()+".recall@k"], r[l.String()+".f1@k"])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// printTrajectoryStats prints the trajectory-based numbers, when present.
func printTrajectoryStats(e *env, rep *metrics.Report) {
	if _, ok := rep.Overall["turns"]; !ok {
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trajectories	file	module	function	")
	for _, m := range []string{"dc_gap", "type_b_rate"} {
		fmt.Fprintf(tw, "%s	", m)
		for _, l := range metrics.Levels {
			fmt.Fprintf(tw, "%.4f	", rep.Overall[l.String()+"."+m])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	var keys []string
	for k := range rep.Overall {
		if !strings.Contains(k, ".") || strings.HasPrefix(k, "tool_calls.") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	fmt.Fprintln(e.stdout, "per episode (mean):")
	for _, k := range keys {
		fmt.Fprintf(e.stdout, "  %-36s %.2f\n", k, rep.Overall[k])
	}
}

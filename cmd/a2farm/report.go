package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/learner/report"
)

// reportOptions are report's flags.
type reportOptions struct {
	out, jsonOut, title string
	gold                goldFlags
	learn               learnFlags
}

func newReportCmd(e *env) *cobra.Command {
	var o reportOptions
	cmd := &cobra.Command{
		Use:   "report [--gold GT.jsonl] [--out FILE] RUN_DIR...",
		Short: "Write one self-contained HTML report of runs: evaluation, advantages, rewards, cost, farm timing",
		Long: `report reads one or more run folders — a learner's output (archive/ and shards/), an up
folder (learner/ inside) or a localize output (trajectories/) — recomputes the labels with the
given hyperparameters, and writes one HTML file that opens offline: the evaluation per level,
repository and iteration; the advantage and weight histograms, group coverage by depth and an
H sweep; reward terms and returns by turn; the discovery–commit gap and type-B rate; episode
cost; and for farm runs the rollout rate, the time to close a group and the dead letters.

Farm folders carry their gold in the shard manifests; a localize folder needs --gold (or
--dataset with --repos). Several folders or iterations are compared side by side.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("give one or more run folders (a learner's output, an up folder or a localize output)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runReport(cmd.Context(), e, &o, args) },
	}
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "HTML file to write (default: report.html in the first run folder)")
	f.StringVar(&o.jsonOut, "json", "", "also write the numbers behind every plot as JSON")
	f.StringVar(&o.title, "title", "", "page title")
	o.gold.bind(cmd)
	o.learn.bind(cmd, e)
	return cmd
}

// runReport loads the run folders, computes the report and writes it.
func runReport(ctx context.Context, e *env, o *reportOptions, dirs []string) error {
	cfg, err := o.learn.config()
	if err != nil {
		return err
	}
	if o.gold.path != "" && o.gold.dataset != "" {
		return usagef("give --gold or --dataset, not both")
	}
	var sources []*report.Source
	for _, dir := range dirs {
		src, err := report.Load(dir)
		if err != nil {
			return &usageError{err}
		}
		sources = append(sources, src)
	}
	opts := report.Options{Title: o.title, Learner: cfg, Languages: e.languages}
	if o.gold.given() {
		if opts.Gold, err = o.gold.load(ctx, e); err != nil {
			return err
		}
	}
	path, err := writeReport(e, sources, opts, o.out, o.jsonOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "report written: %s\n", path)
	return nil
}

// writeReport builds the report of sources and writes it to out (default:
// report.html in the first source's folder); it returns the path.
func writeReport(e *env, sources []*report.Source, opts report.Options, out, jsonOut string) (string, error) {
	r, err := report.Build(sources, opts)
	if err != nil {
		return "", err
	}
	for _, s := range r.Series {
		if s.NoGold > 0 {
			e.log.Warn().Str("run", s.Label).Int("instances", s.NoGold).
				Msg("instances without gold are left out of the evaluation and the labels; pass --gold or --dataset")
		}
	}
	if out == "" {
		out = filepath.Join(sources[0].Dir, "report.html")
	}
	if err := atomicfile.Write(out, func(w io.Writer) error { return report.Render(w, r, time.Now()) }); err != nil {
		return "", err
	}
	if jsonOut != "" {
		err := atomicfile.Write(jsonOut, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(r)
		})
		if err != nil {
			return "", err
		}
	}
	return out, nil
}

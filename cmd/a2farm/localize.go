package main

import (
	"fmt"
	"github.com/a2farm/a2farm/schema"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator/dataset"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/worker"
)

func newLocalizeCmd(e *env) *cobra.Command {
	var (
		datasetPath, reposDir, out  string
		samples, limit, concurrency int
		strict, withRequirements    bool
		cf                          cacheFlags
		rf                          runFlags
		ef                          endpointFlags
	)
	cmd := &cobra.Command{
		Use:   "localize --dataset FILE --repos DIR --policy heuristic --samples N --out DIR",
		Short: "Run the agent over a dataset in one process and write trajectories and predictions",
		Long: `localize plays --samples episodes per instance (no NATS) and writes
DIR/trajectories/<instance>.arrow (one Arrow IPC stream per instance, one row per
turn) and DIR/loc_outputs.jsonl (one row per instance and sample: found_files,
found_modules, found_entities, raw_output). Score them with a2farm eval.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if datasetPath == "" || reposDir == "" || out == "" {
				return usagef("--dataset, --repos and --out are required")
			}
			spec, err := rf.spec()
			if err != nil {
				return err
			}
			policies, err := ef.registry()
			if err != nil {
				return err
			}
			if err := servable(policies, spec); err != nil {
				return err
			}
			if samples < 1 || limit < 0 || concurrency < 0 {
				return usagef("--samples must be >= 1, --limit and --concurrency >= 0")
			}
			opts, err := cf.options(e.languages)
			if err != nil {
				return err
			}
			repos := gitrepo.NewSet(reposDir)
			defer repos.Close()
			ds, err := dataset.Load(cmd.Context(), datasetPath, dataset.Options{Strict: strict, Repos: repos, WithRequirements: withRequirements})
			if err != nil {
				return err
			}
			for _, s := range ds.Skipped {
				e.log.Warn().Int("line", s.Line).Str("instance", s.InstanceID).Msg("skipping row: " + s.Reason)
			}
			instances := ds.Instances
			if limit > 0 && limit < len(instances) {
				instances = instances[:limit]
			}
			report, finish := e.progress("rollouts")
			trs, err := worker.Localize(cmd.Context(), worker.LocalizeConfig{
				Instances: instances, Repos: repos, Spec: spec, Policies: policies, Index: opts, Samples: samples,
				Concurrency: concurrency, Out: out, Log: e.log, Progress: report, OutageBudget: ef.outageBudget,
			})
			finish()
			if err != nil {
				return err
			}
			status := map[schema.Status]int{}
			turns := 0
			for _, tr := range trs {
				status[tr.Status]++
				turns += len(tr.Turns)
			}
			fmt.Fprintf(e.stdout, "%d rollouts (%d turns) over %d instances: %v\n  predictions %s\n  trajectories %s\n",
				len(trs), turns, len(instances), status, filepath.Join(out, "loc_outputs.jsonl"), filepath.Join(out, "trajectories"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&datasetPath, "dataset", "", "dataset JSONL or Parquet")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "folder of git repositories named owner__name (env A2FARM_REPOS)")
	f.StringVar(&out, "out", "", "output folder")
	f.IntVar(&samples, "samples", 1, "episodes per instance")
	f.IntVar(&limit, "limit", 0, "run only the first K instances (0: all)")
	f.IntVar(&concurrency, "concurrency", 4, "episodes in flight")
	f.BoolVar(&strict, "strict", false, "fail on the first bad dataset row")
	f.BoolVar(&withRequirements, "with-requirements", false, withRequirementsUsage)
	cf.bind(cmd)
	rf.bind(cmd, "heuristic")
	ef.bind(cmd)
	return cmd
}

package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

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
		resume                      bool
		grace                       time.Duration
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
found_modules, found_entities, raw_output). Score them with a2farm eval.

Ctrl-C starts no new episode and lets running ones finish within --grace (a second
Ctrl-C stops them at once); everything that finished is written and the command exits
130. --resume continues the run in the same --out, playing only the samples it lacks;
without it a used --out is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("dataset", datasetPath, "repos", reposDir, "out", out); err != nil {
				return err
			}
			if err := inputs("dataset", datasetPath, "repos", reposDir); err != nil {
				return err
			}
			if err := checkSamples(samples); err != nil {
				return err
			}
			if err := checkConcurrency(concurrency); err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit %d: want 0 (all) or more", limit)
			}
			if grace < 0 {
				return usagef("--grace %s: want 0 or more", grace)
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
			opts, err := cf.options(e.languages)
			if err != nil {
				return err
			}
			repos := gitrepo.NewSet(reposDir)
			defer repos.Close()
			sel, err := e.selection()
			if err != nil {
				return err
			}
			ds, err := dataset.Load(cmd.Context(), datasetPath, dataset.Options{Strict: strict, Repos: repos, WithRequirements: withRequirements, Languages: sel})
			if err != nil {
				return err
			}
			ds.Log(e.log)
			instances := ds.Instances
			if limit > 0 && limit < len(instances) {
				instances = instances[:limit]
			}
			report, finish := e.progress("rollouts")
			res, err := worker.Localize(cmd.Context(), worker.LocalizeConfig{
				Instances: instances, Repos: repos, Spec: spec, Policies: policies, Index: opts, Samples: samples,
				Concurrency: concurrency, Out: out, Resume: resume, Grace: grace, Abort: e.abort,
				Log: e.log, Progress: report, OutageBudget: ef.outageBudget,
			})
			finish()
			var inUse *worker.OutInUseError
			if errors.As(err, &inUse) {
				return &usageError{err}
			}
			if err != nil && !errors.Is(err, worker.ErrInterrupted) {
				return err
			}
			turns := 0
			for _, tr := range res.Trajectories {
				turns += len(tr.Turns)
			}
			resumed := ""
			switch {
			case res.Resumed > 0 && res.Resumed == len(res.Trajectories):
				resumed = "; all from the earlier run, nothing was left to play"
			case res.Resumed > 0:
				resumed = fmt.Sprintf("; %d from the earlier run", res.Resumed)
			}
			fmt.Fprintf(e.stdout, "%d rollouts (%d turns) over %d instances: %s%s\n  predictions %s\n  trajectories %s\n",
				len(res.Trajectories), turns, len(instances), outcomes(res.Trajectories), resumed,
				filepath.Join(out, "loc_outputs.jsonl"), filepath.Join(out, "trajectories"))
			if err != nil {
				return &interruptedError{fmt.Sprintf("%d of %d samples finished and written to %s; continue with the same command and --resume",
					res.Finished, res.Wanted, out)}
			}
			return nonePlayedOut(res.Trajectories)
		},
	}
	f := cmd.Flags()
	f.StringVar(&datasetPath, "dataset", "", "dataset JSONL or Parquet")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "folder of git repositories named owner__name (env A2FARM_REPOS)")
	f.StringVar(&out, "out", "", "output folder (refused when it holds a run, unless --resume)")
	f.IntVar(&samples, "samples", 1, fmt.Sprintf("episodes per instance (1 to %d)", worker.MaxSamples))
	f.IntVar(&limit, "limit", 0, "run only the first K instances (0: all)")
	f.IntVar(&concurrency, "concurrency", 4, "episodes in flight")
	f.BoolVar(&strict, "strict", false, "fail on the first bad dataset row")
	f.BoolVar(&withRequirements, "with-requirements", false, withRequirementsUsage)
	f.BoolVar(&resume, "resume", false, "continue the run in --out: play only the samples it has not finished (same flags)")
	f.DurationVar(&grace, "grace", worker.DefaultLocalizeGrace, "after Ctrl-C, how long running episodes may finish before they are cancelled")
	cf.bind(cmd)
	rf.bind(cmd, "heuristic")
	ef.bind(cmd)
	e.bindLanguages(cmd, true)
	return cmd
}

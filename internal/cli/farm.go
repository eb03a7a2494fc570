package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/worker"
)

func newCoordinatorCmd(e *env) *cobra.Command {
	var nf natsFlags
	var mf metricsFlags
	var rf runFlags
	var datasetPath, reposDir, runID string
	var samples int
	var iteration int64
	var detach, strict, rerun bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "coordinator --nats URL --dataset FILE --repos DIR --samples N --run ID",
		Short: "Validate a dataset, extract gold, publish issue × N jobs and wait until each has a trajectory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if datasetPath == "" || reposDir == "" || runID == "" {
				return usagef("--dataset, --repos and --run are required")
			}
			spec, err := rf.spec()
			if err != nil {
				return err
			}
			farm, err := joinFarm(ctx, e, &nf, &mf, "coordinator")
			if err != nil {
				return err
			}
			defer farm.leave()
			b := farm.bus
			report, err := coordinator.RunGold(ctx, coordinator.GoldConfig{Dataset: datasetPath, ReposDir: reposDir,
				Strict: strict, Language: e.language, MaxEditFiles: gold.DefaultMaxEditFiles, Log: e.log})
			if err != nil {
				return err
			}
			report2, finish := e.progress("published")
			pub, err := coordinator.Publish(ctx, coordinator.RunConfig{Bus: b, RunID: runID, Iteration: iteration,
				Instances: report.Instances, Gold: report.Locations(), Samples: samples, Spec: spec, Rerun: rerun, Progress: report2})
			finish()
			if err != nil {
				return err
			}
			m := pub.Manifest
			switch {
			case pub.Complete:
				fmt.Fprintf(e.stdout, "run %s iteration %d is complete already: all %d jobs have a trajectory; nothing published (--rerun makes new attempts)\n",
					runID, iteration, m.Expected)
				return nil
			case pub.Answered > 0:
				fmt.Fprintf(e.stdout, "run %s iteration %d: %d of %d jobs have a trajectory; %d published (attempt %d)\n",
					runID, iteration, pub.Answered, m.Expected, pub.Queued, m.Attempt)
			default:
				fmt.Fprintf(e.stdout, "run %s iteration %d: %d jobs published (attempt %d)\n", runID, iteration, pub.Queued, m.Attempt)
			}
			if detach {
				return nil
			}
			// Jobs that exhaust their deliveries are dead-lettered here
			// too; with a learner running, each advisory goes to one of them.
			defer b.StartDeadJobHandler(ctx, e.log)()
			wait, done := e.progress("trajectories")
			err = coordinator.Wait(waitCtx(ctx, timeout), b, m, wait,
				func(seq uint64, why string) {
					e.log.Warn().Uint64("seq", seq).Str("reason", why).Msg("a message in the run's trajectory log counts nowhere")
				},
				func(err error) { e.log.Warn().Err(err).Msg("lost the NATS server; waiting for it (the run goes on)") })
			done()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					return fmt.Errorf("run %s not complete after --timeout %s (a2farm status shows where it stands)", runID, timeout)
				}
				return err
			}
			fmt.Fprintf(e.stdout, "every job of run %s has a trajectory\n", runID)
			return nil
		},
	}
	nf.bind(cmd)
	mf.bind(cmd)
	rf.bind(cmd, "openai")
	f := cmd.Flags()
	f.StringVar(&datasetPath, "dataset", "", "dataset JSONL or Parquet")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories named owner__name")
	f.StringVar(&runID, "run", "", "run id")
	f.Int64Var(&iteration, "iteration", 0, "rollout-training iteration")
	f.IntVar(&samples, "samples", 8, "rollouts per instance")
	f.BoolVar(&detach, "detach", false, "return after publishing instead of waiting for the trajectories")
	f.BoolVar(&rerun, "rerun", false, "publish a new attempt of every job of a run that exists (by default a finished run publishes nothing, an unfinished one only its missing jobs)")
	f.DurationVar(&timeout, "timeout", 0, "give up waiting after this long (0: wait until the run is complete; NATS outages are waited out)")
	f.BoolVar(&strict, "strict", false, "fail on the first bad dataset row")
	return cmd
}

func newWorkerCmd(e *env) *cobra.Command {
	var nf natsFlags
	var mf metricsFlags
	var ef endpointFlags
	var cf cacheFlags
	var reposDir, id string
	var concurrency, keepIndexes int
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "worker --nats URL --repos DIR [--base-url URL | --endpoint MODEL=URL ...] [--concurrency C] [--cache DIR]",
		Short: "Pull jobs, run episodes and publish trajectories (scale by starting more)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reposDir == "" {
				return usagef("--repos is required")
			}
			if keepIndexes < 0 {
				return usagef("--keep-indexes must be 0 or more, got %d", keepIndexes)
			}
			if keepIndexes == 0 {
				keepIndexes = -1 // worker.Config's "none"; its zero means the default
			}
			policies, err := ef.registry()
			if err != nil {
				return err
			}
			opts, err := cf.options(e.language)
			if err != nil {
				return err
			}
			farm, err := joinFarm(cmd.Context(), e, &nf, &mf, "worker")
			if err != nil {
				return err
			}
			defer farm.leave()
			repos := gitrepo.NewSet(reposDir)
			defer repos.Close()
			e.log.Info().Int("concurrency", concurrency).Strs("policies", policies.Offers()).Msg("worker started")
			return worker.Run(cmd.Context(), worker.Config{Bus: farm.bus, Repos: repos, Policies: policies, Index: opts,
				Concurrency: concurrency, Grace: grace, KeepIndexes: keepIndexes, WorkerID: id, Version: version(), Log: e.log,
				OnTrajectory: farm.metrics.ObserveTrajectory, OnIndexBuilt: farm.metrics.IndexBuilt})
		},
	}
	nf.bind(cmd)
	mf.bind(cmd)
	ef.bind(cmd)
	cf.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories named owner__name (env A2FARM_REPOS)")
	f.IntVar(&concurrency, "concurrency", 32, "episodes in flight")
	f.DurationVar(&grace, "grace", 30*time.Second, "on SIGTERM, how long running episodes may finish before their jobs are handed back")
	f.IntVar(&keepIndexes, "keep-indexes", 4, "snapshot indexes kept open after their last episode, for the next job on the same snapshot (0: none)")
	f.StringVar(&id, "id", envOr("A2FARM_WORKER_ID", ""), "worker id (default host-pid)")
	return cmd
}

func newLearnerCmd(e *env) *cobra.Command {
	var nf natsFlags
	var mf metricsFlags
	var out string
	var deadline, takeover time.Duration
	cfg := learner.DefaultConfig()
	cfg.Rewards.Language = e.language
	cmd := &cobra.Command{
		Use:   "learner --nats URL --out DIR",
		Short: "Archive trajectories, close groups and write weighted training shards",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("--out is required")
			}
			farm, err := joinFarm(cmd.Context(), e, &nf, &mf, "learner")
			if err != nil {
				return err
			}
			defer farm.leave()
			e.log.Info().Str("out", out).Msg("learner started")
			return learner.Serve(cmd.Context(), learner.ServiceConfig{Bus: farm.bus, Out: out, Learner: cfg, GroupDeadline: deadline, TakeoverAfter: takeover, Log: e.log,
				OnGroupClosed: func(run string, it int64, inst string, n, rows int) {
					farm.metrics.GroupClosed(rows)
					e.log.Info().Str("run", run).Str("instance", inst).Int("trajectories", n).Int("rows", rows).
						Str("shards", filepath.Join(out, "shards")).Msg("group written")
				}})
		},
	}
	nf.bind(cmd)
	mf.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "folder for the archive and shards")
	f.DurationVar(&deadline, "group-deadline", 30*time.Minute, "close a group still missing trajectories this long after its first")
	f.DurationVar(&takeover, "takeover-after", 30*time.Second, "a standby learner takes the trajectory log over this long after the active one died (at once when it stops cleanly)")
	f.IntVar(&cfg.Advantage.H, "H", cfg.Advantage.H, "history length")
	f.Float64Var(&cfg.Rewards.Gamma, "gamma", cfg.Rewards.Gamma, "discount")
	f.Float64Var(&cfg.Advantage.Beta, "beta", cfg.Advantage.Beta, "weight temperature")
	f.Float64Var(&cfg.Rewards.StepCost, "step-cost", cfg.Rewards.StepCost, "cost per step")
	f.StringVar(&cfg.Rewards.Discovery, "discovery", cfg.Rewards.Discovery, "surfaced or reference")
	return cmd
}

// waitCtx bounds ctx by timeout when one is set.
func waitCtx(ctx context.Context, timeout time.Duration) context.Context {
	if timeout <= 0 {
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	context.AfterFunc(ctx, cancel)
	return ctx
}

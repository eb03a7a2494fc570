package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
)

// coordinatorOptions are the coordinator's flags.
type coordinatorOptions struct {
	nats                      natsFlags
	metrics                   metricsFlags
	run                       runFlags
	datasetPath, reposDir, id string
	samples                   int
	iteration                 int64
	detach, strict, rerun     bool
	withRequirements          bool
	timeout                   time.Duration
}

func newCoordinatorCmd(e *env) *cobra.Command {
	var o coordinatorOptions
	cmd := &cobra.Command{
		Use:   "coordinator --nats URL --dataset FILE --repos DIR --samples N --run ID",
		Short: "Validate a dataset, extract gold, publish issue × N jobs and wait until each has a trajectory",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runCoordinator(cmd.Context(), e, &o) },
	}
	o.nats.bind(cmd)
	o.metrics.bind(cmd)
	o.run.bind(cmd, "openai")
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.datasetPath, "dataset", "", "dataset JSONL or Parquet")
	f.StringVar(&o.reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories named owner__name")
	f.StringVar(&o.id, "run", "", "run id")
	f.Int64Var(&o.iteration, "iteration", 0, "rollout-training iteration")
	f.IntVar(&o.samples, "samples", 8, "rollouts per instance")
	f.BoolVar(&o.detach, "detach", false, "return after publishing instead of waiting for the trajectories")
	f.BoolVar(&o.rerun, "rerun", false, "publish a new attempt of every job of a run that exists (by default a finished run publishes nothing, an unfinished one only its missing jobs)")
	f.DurationVar(&o.timeout, "timeout", 0, "give up waiting after this long (0: wait until the run is complete; NATS outages are waited out)")
	f.BoolVar(&o.strict, "strict", false, "fail on the first bad dataset row")
	f.BoolVar(&o.withRequirements, "with-requirements", false, withRequirementsUsage)
	return cmd
}

// runCoordinator extracts the dataset's gold, publishes the run's jobs
// (only the missing ones of a run that exists) and, unless detached,
// waits until every job has a trajectory.
func runCoordinator(ctx context.Context, e *env, o *coordinatorOptions) error {
	if err := required("dataset", o.datasetPath, "repos", o.reposDir, "run", o.id); err != nil {
		return err
	}
	if err := inputs("dataset", o.datasetPath, "repos", o.reposDir); err != nil {
		return err
	}
	if err := checkSamples(o.samples); err != nil {
		return err
	}
	spec, err := o.run.spec()
	if err != nil {
		return err
	}
	farm, err := joinFarm(ctx, e, &o.nats, &o.metrics, "coordinator")
	if err != nil {
		return err
	}
	defer farm.leave()
	goldCfg, err := e.goldConfig(o.datasetPath, o.reposDir)
	if err != nil {
		return err
	}
	goldCfg.Strict, goldCfg.WithRequirements = o.strict, o.withRequirements
	report, err := coordinator.RunGold(ctx, goldCfg)
	if err != nil {
		return err
	}
	progress, finish := e.progress("published")
	// A cluster that answers "not now" is waited out within --timeout too.
	pub, err := coordinator.Publish(waitCtx(ctx, o.timeout), coordinator.RunConfig{Bus: farm.bus, RunID: o.id, Iteration: o.iteration,
		Instances: report.Instances, Gold: report.Locations(), Samples: o.samples, Spec: spec, Rerun: o.rerun, Progress: progress,
		OnWait: func(err error) {
			e.log.Warn().Err(err).Msg("JetStream answers 'not now' (a cluster electing a leader, a node restarting); waiting")
		}})
	finish()
	if err != nil {
		return err
	}
	printPublished(e, o.id, o.iteration, pub)
	if pub.Complete {
		return nil
	}
	if o.detach {
		if spec.Branching.On() {
			e.log.Warn().Msg("--detach: the run's branches are planned by a coordinator that follows it; run this command again without --detach (it resumes the run), or the learner closes each group at its deadline without branches")
		}
		return nil
	}
	return waitForRun(ctx, e, farm.bus, pub.Manifest, report.Instances, o.timeout)
}

func printPublished(e *env, runID string, iteration int64, pub *coordinator.Published) {
	m := pub.Manifest
	switch {
	case pub.Complete:
		fmt.Fprintf(e.stdout, "run %s iteration %d is complete already: all %d jobs have a trajectory; nothing published (--rerun makes new attempts)\n",
			runID, iteration, pub.Answered)
	case pub.Answered > 0:
		fmt.Fprintf(e.stdout, "run %s iteration %d: %d of %d jobs have a trajectory; %d published (attempt %d)\n",
			runID, iteration, pub.Answered, m.Expected, pub.Queued, m.Attempt)
	default:
		fmt.Fprintf(e.stdout, "run %s iteration %d: %d jobs published (attempt %d)\n", runID, iteration, pub.Queued, m.Attempt)
	}
}

// waitForRun waits until every job of the run has a trajectory, through
// NATS outages, or until timeout (0: no limit).
func waitForRun(ctx context.Context, e *env, b *bus.Bus, m *schema.RunManifest, instances []schema.Instance, timeout time.Duration) error {
	// Jobs that exhaust their deliveries are dead-lettered here too; with
	// a learner running, each advisory goes to one of them.
	defer b.StartDeadJobHandler(ctx, e.log)()
	progress, done := e.progress("trajectories")
	err := coordinator.Wait(waitCtx(ctx, timeout), b, m, coordinator.WaitOptions{Instances: instances, Progress: progress,
		Rejected: func(seq uint64, why string) {
			e.log.Warn().Uint64("seq", seq).Str("reason", why).Msg("a message in the run's trajectory log counts nowhere")
		},
		OnError: func(err error) { e.log.Warn().Err(err).Msg("lost the NATS server; waiting for it (the run goes on)") }})
	done()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return fmt.Errorf("run %s not complete after --timeout %s (a2farm status shows where it stands)", m.RunID, timeout)
		}
		if ctx.Err() != nil {
			return &interruptedError{fmt.Sprintf("run %s goes on in the farm (its jobs are published); `a2farm status --run %s` follows it, and the same command again waits for it",
				m.RunID, m.RunID)}
		}
		return err
	}
	fmt.Fprintf(e.stdout, "every job of run %s has a trajectory\n", m.RunID)
	return nil
}

func newWorkerCmd(e *env) *cobra.Command {
	var nf natsFlags
	var mf metricsFlags
	var ef endpointFlags
	var cf cacheFlags
	var reposDir, id string
	var concurrency, keepIndexes int
	indexMemory := byteSize(worker.DefaultIndexMemory)
	var grace time.Duration
	var localIndexes bool
	cmd := &cobra.Command{
		Use:   "worker --nats URL --repos DIR [--base-url URL | --endpoint MODEL=URL ...] [--concurrency C] [--cache DIR]",
		Short: "Pull jobs, run episodes and publish trajectories (scale by starting more)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("repos", reposDir); err != nil {
				return err
			}
			if err := inputs("repos", reposDir); err != nil {
				return err
			}
			if err := checkConcurrency(concurrency); err != nil {
				return err
			}
			if keepIndexes < 0 {
				return usagef("--keep-indexes must be 0 or more, got %d", keepIndexes)
			}
			if indexMemory <= 0 {
				return usagef("--index-memory must be above 0, got %s", indexMemory.String())
			}
			if keepIndexes == 0 {
				keepIndexes = -1 // worker.Config's "none"; its zero means the default
			}
			policies, err := ef.registry()
			if err != nil {
				return err
			}
			opts, err := cf.options(e.languages)
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
			farm.metrics.WatchReplicas(replicaMetrics(policies))
			e.log.Info().Int("concurrency", concurrency).Strs("policies", policies.Offers()).Msg("worker started")
			return worker.Run(cmd.Context(), worker.Config{Bus: farm.bus, Repos: repos, Policies: policies, Index: opts,
				Concurrency: concurrency, Grace: grace, Abort: e.abort, KeepIndexes: keepIndexes, IndexMemory: int64(indexMemory), LocalIndexes: localIndexes, WorkerID: id, OutageBudget: ef.outageBudget,
				Version: version(), Log: e.log,
				OnTrajectory: farm.metrics.ObserveTrajectory, OnIndex: farm.metrics.IndexReady, OnIndexMemory: farm.metrics.IndexMemory,
				OnHandOff: farm.metrics.HandedOff})
		},
	}
	nf.bind(cmd)
	mf.bind(cmd)
	ef.bind(cmd)
	cf.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories named owner__name (env A2FARM_REPOS)")
	f.IntVar(&concurrency, "concurrency", 32, "episodes in flight")
	f.DurationVar(&grace, "grace", 30*time.Second, "on a stop request (SIGTERM, Ctrl-C), how long running episodes may finish before their jobs are handed back; a second request ends it at once")
	f.IntVar(&keepIndexes, "keep-indexes", 4, "snapshot indexes kept open after their last episode, for the next job on the same snapshot (0: none)")
	f.Var(&indexMemory, "index-memory", "bound on the memory of the snapshot indexes held open (estimated); idle ones beyond it are closed, least recently used first")
	f.BoolVar(&localIndexes, "local-indexes", false, "build every index here and share none; by default a snapshot is built by one worker of the farm and fetched by the rest")
	f.StringVar(&id, "id", envOr("A2FARM_WORKER_ID", ""), "worker id (default host-pid)")
	return service(cmd)
}

func newLearnerCmd(e *env) *cobra.Command {
	var nf natsFlags
	var mf metricsFlags
	var out string
	var deadline, takeover time.Duration
	var lf learnFlags
	cmd := &cobra.Command{
		Use:   "learner --nats URL --out DIR",
		Short: "Archive trajectories, close groups and write weighted training shards",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("--out is required")
			}
			cfg, err := lf.config()
			if err != nil {
				return err
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
	lf.bind(cmd, e)
	return service(cmd)
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

package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/embednats"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
)

func newUpCmd(e *env) *cobra.Command {
	var (
		out, datasetPath, reposDir, runID string
		samples, workers, concurrency     int
		rf                                runFlags
		ef                                endpointFlags
		cf                                cacheFlags
		mf                                metricsFlags
	)
	cmd := &cobra.Command{
		Use:   "up [--dataset FILE --repos DIR] [--samples N] [--workers W] --out DIR",
		Short: "Run the whole farm in one process: embedded NATS, coordinator, workers and learner",
		Long: `up starts an embedded JetStream server (stored under DIR/nats), publishes
issue × N jobs for the dataset (the built-in sample when --dataset is not given), runs
--workers workers and the learner, waits until every job has a trajectory and every
group its shard, and prints the evaluation table. Shards land in DIR/learner/shards,
the trajectory archive in DIR/learner/archive.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if out == "" {
				return usagef("--out is required")
			}
			if samples < 1 || workers < 1 || concurrency < 1 {
				return usagef("--samples, --workers and --concurrency must be >= 1")
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
			opts, err := cf.options(e.language)
			if err != nil {
				return err
			}
			if datasetPath == "" {
				dir := filepath.Join(out, "sample")
				if err := os.RemoveAll(dir); err != nil {
					return err
				}
				l, err := sample.Write(dir)
				if err != nil {
					return err
				}
				datasetPath, reposDir = l.Dataset, l.ReposDir
			} else if reposDir == "" {
				return usagef("--dataset needs --repos")
			}
			if runID == "" {
				runID = "up-" + time.Now().UTC().Format("20060102-150405")
			}

			ns, err := embednats.Start(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
				StoreDir: filepath.Join(out, "nats"), NoLog: true})
			if err != nil {
				return err
			}
			defer embednats.Stop(ns)
			nc, err := nats.Connect(ns.ClientURL())
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			b, err := bus.Open(ctx, js, bus.DefaultConfig())
			if err != nil {
				return err
			}
			instruments, stopMetrics, err := mf.start(ctx, e, nc, b)
			if err != nil {
				return err
			}
			defer stopMetrics()

			repos := gitrepo.NewSet(reposDir)
			defer repos.Close()
			report, err := coordinator.RunGold(ctx, coordinator.GoldConfig{Dataset: datasetPath, ReposDir: reposDir,
				Language: e.language, MaxEditFiles: gold.DefaultMaxEditFiles, Log: e.log})
			if err != nil {
				return err
			}
			var golds []schema.Gold
			for _, r := range report.Rows {
				golds = append(golds, r.Gold)
			}
			pub, err := coordinator.Publish(ctx, coordinator.RunConfig{Bus: b, RunID: runID, Instances: report.Instances,
				Gold: report.Locations(), Samples: samples, Spec: spec})
			if err != nil {
				return err
			}
			m := pub.Manifest
			e.log.Info().Str("run", runID).Int("jobs", pub.Queued).Msg("jobs published")

			farmCtx, stopFarm := context.WithCancel(ctx)
			defer stopFarm()
			var wg sync.WaitGroup
			var mu sync.Mutex
			closed := 0
			errs := make(chan error, workers+1)
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := worker.Run(farmCtx, worker.Config{Bus: b, Repos: repos, Policies: policies, Index: opts,
						Concurrency: concurrency, WorkerID: fmt.Sprintf("up-%d", i), Version: version(), Log: e.log,
						OnTrajectory: instruments.ObserveTrajectory, OnIndexBuilt: instruments.IndexBuilt}); err != nil {
						errs <- err
					}
				}()
			}
			learnerOut := filepath.Join(out, "learner")
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := learner.Serve(farmCtx, learner.ServiceConfig{Bus: b, Out: learnerOut, Learner: learner.DefaultConfig(), Log: e.log,
					OnGroupClosed: func(_ string, _ int64, _ string, _, rows int) {
						instruments.GroupClosed(rows)
						mu.Lock()
						closed++
						mu.Unlock()
					}}); err != nil {
					errs <- err
				}
			}()

			report2, finish := e.progress("rollouts")
			groups := len(report.Instances)
			tracker, err := b.TrackRun(ctx, m, true)
			if err != nil {
				return err
			}
			for {
				n, err := tracker.Update(ctx)
				if err != nil {
					return err
				}
				report2(min(n, m.Expected), m.Expected)
				mu.Lock()
				done := n >= m.Expected && closed >= groups
				mu.Unlock()
				if done {
					break
				}
				select {
				case err := <-errs:
					return err
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
			finish()
			stopFarm()
			wg.Wait()

			trs, err := schema.ReadTrajectoryDir(filepath.Join(learnerOut, "archive", bus.Token(runID), "0", "*"))
			if err != nil {
				return err
			}
			var preds []schema.LocOutput
			for _, tr := range trs {
				preds = append(preds, schema.LocOutput{InstanceID: tr.InstanceID, Sample: tr.Sample,
					Files: tr.Predictions.Files, Modules: tr.Predictions.Modules, Entities: tr.Predictions.Entities})
			}
			rep, err := metrics.Evaluate(preds, golds, metrics.EvalOptions{Language: e.language})
			if err != nil {
				return err
			}
			for k, v := range metrics.TrajectoryStats(trs, golds, e.language) {
				rep.Overall[k] = v
			}
			printReport(e, rep)
			fmt.Fprintf(e.stdout, "\nrun %s: %d trajectories archived in %s, shards in %s\n", runID, len(trs),
				filepath.Join(learnerOut, "archive"), filepath.Join(learnerOut, "shards"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "folder for the run (NATS store, archive, shards)")
	f.StringVar(&datasetPath, "dataset", "", "dataset (default: the built-in sample)")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories for --dataset")
	f.StringVar(&runID, "run", "", "run id (default up-<time>)")
	f.IntVar(&samples, "samples", 4, "rollouts per instance")
	f.IntVar(&workers, "workers", 2, "workers in this process")
	f.IntVar(&concurrency, "concurrency", 8, "episodes in flight per worker")
	rf.bind(cmd, "heuristic")
	ef.bind(cmd)
	mf.bind(cmd)
	cf.bind(cmd)
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/coordinator/statuspage"
	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/embednats"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/metrics"
	runreport "github.com/a2farm/a2farm/learner/report"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/policy"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// upOptions are up's flags.
type upOptions struct {
	out, datasetPath, reposDir, runID string
	httpAddr                          string
	samples, workers, concurrency     int
	localIndexes, withRequirements    bool
	resume                            bool
	grace                             time.Duration
	run                               runFlags
	endpoints                         endpointFlags
	cache                             cacheFlags
	metrics                           metricsFlags
	learn                             learnFlags
}

func newUpCmd(e *env) *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up [--dataset FILE --repos DIR] [--samples N] [--workers W] --out DIR",
		Short: "Run the whole farm in one process: embedded NATS, coordinator, workers and learner",
		Long: `up starts an embedded JetStream server (stored under DIR/nats), publishes
issue × N jobs for the dataset (the built-in sample when --dataset is not given), runs
--workers workers and the learner, waits until every job has a trajectory and every
group its shard, prints the evaluation table and writes the run's report to
DIR/report.html. Shards land in DIR/learner/shards, the trajectory archive in
DIR/learner/archive. --http ADDR serves the live status page while the farm runs, and
after it until interrupted.

Ctrl-C stops taking jobs and lets running episodes finish within --grace (a second
Ctrl-C stops them at once); the archive and the report of what finished are written and
the command exits 130. --resume continues the run in the same --out; without it a used
--out is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), e, &o) },
	}
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "folder for the run (NATS store, archive, shards)")
	f.StringVar(&o.datasetPath, "dataset", "", "dataset (default: the built-in sample)")
	f.StringVar(&o.reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories for --dataset")
	f.StringVar(&o.runID, "run", "", "run id (default up-<time>)")
	f.StringVar(&o.httpAddr, "http", "", "serve the live status page on this address (loopback unless a host is given); up then waits for an interrupt")
	f.IntVar(&o.samples, "samples", 4, "rollouts per instance")
	f.IntVar(&o.workers, "workers", 2, "workers in this process")
	f.IntVar(&o.concurrency, "concurrency", 8, "episodes in flight per worker")
	f.BoolVar(&o.withRequirements, "with-requirements", false, withRequirementsUsage)
	f.BoolVar(&o.resume, "resume", false, "continue the interrupted run in --out (same flags): jobs already answered are not played again")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after Ctrl-C, how long running episodes may finish before their jobs are left for --resume")
	f.BoolVar(&o.localIndexes, "local-indexes", false, "every worker builds its own indexes instead of sharing them through the farm's store")
	o.run.bind(cmd, "heuristic")
	o.endpoints.bind(cmd)
	o.metrics.bind(cmd)
	o.cache.bind(cmd)
	o.learn.bind(cmd, e)
	return cmd
}

// upPlan is what up checked and decided before starting anything.
type upPlan struct {
	spec     schema.RunSpec
	policies *policy.Registry
	index    repoindex.BuildOptions
	learn    learner.Config
}

func (o *upOptions) plan(e *env) (*upPlan, error) {
	if err := required("out", o.out); err != nil {
		return nil, err
	}
	if o.datasetPath != "" && o.reposDir == "" {
		return nil, usagef("--dataset needs --repos")
	}
	if err := inputs("dataset", o.datasetPath, "repos", o.reposDir); err != nil {
		return nil, err
	}
	for _, check := range []error{checkSamples(o.samples), checkRange("workers", o.workers, 1, 256), checkConcurrency(o.concurrency)} {
		if check != nil {
			return nil, check
		}
	}
	var p upPlan
	var err error
	if p.spec, err = o.run.spec(); err != nil {
		return nil, err
	}
	if p.policies, err = o.endpoints.registry(); err != nil {
		return nil, err
	}
	if err := servable(p.policies, p.spec); err != nil {
		return nil, err
	}
	if p.index, err = o.cache.options(e.languages); err != nil {
		return nil, err
	}
	if p.learn, err = o.learn.config(); err != nil {
		return nil, err
	}
	if o.grace < 0 {
		return nil, usagef("--grace %s: want 0 or more", o.grace)
	}
	if o.httpAddr != "" {
		if _, err := statuspage.ListenAddr(o.httpAddr); err != nil {
			return nil, &usageError{err}
		}
	}
	if err := o.claimOut(p.spec); err != nil {
		return nil, err
	}
	return &p, nil
}

// upState is DIR/up.json: the run an up folder holds, so that --resume
// continues that run and nothing else.
type upState struct {
	RunID   string         `json:"run_id"`
	Dataset string         `json:"dataset,omitempty"`
	Samples int            `json:"samples"`
	Spec    schema.RunSpec `json:"spec"`
}

const upStateName = "up.json"

// claimOut refuses an --out that holds a run unless --resume, and with
// --resume takes the run id from the folder and refuses other settings.
func (o *upOptions) claimOut(spec schema.RunSpec) error {
	data, err := os.ReadFile(filepath.Join(o.out, upStateName))
	used := err == nil
	if !used {
		for _, name := range []string{"nats", "learner"} {
			if _, err := os.Stat(filepath.Join(o.out, name)); err == nil {
				used = true
			}
		}
	}
	switch {
	case used && !o.resume:
		return usagef("--out %s holds a run; pass --resume to continue it, or choose another --out", o.out)
	case o.resume && !used:
		return usagef("--resume: --out %s holds no run to continue", o.out)
	case o.resume && data == nil:
		return usagef("--resume: --out %s has no %s (written by an older a2farm); it cannot be resumed", o.out, upStateName)
	case o.resume:
		var st upState
		if err := json.Unmarshal(data, &st); err != nil {
			return usagef("--resume: %s: %v", filepath.Join(o.out, upStateName), err)
		}
		if o.runID != "" && o.runID != st.RunID {
			return usagef("--resume: --out %s holds run %s, not --run %s", o.out, st.RunID, o.runID)
		}
		want := upState{RunID: st.RunID, Dataset: o.datasetPath, Samples: o.samples, Spec: spec}
		if a, b := mustJSON(st), mustJSON(want); a != b {
			return usagef("--resume: run %s was started with other flags (dataset, samples, policy, sampling or limits); resume it with the same flags", st.RunID)
		}
		o.runID = st.RunID
	}
	if o.runID == "" {
		o.runID = "up-" + time.Now().UTC().Format("20060102-150405")
	}
	return nil
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain data
	}
	return string(data)
}

// writeState records the run in --out for --resume.
func (o *upOptions) writeState(spec schema.RunSpec, dataset string) error {
	data, err := json.MarshalIndent(upState{RunID: o.runID, Dataset: dataset, Samples: o.samples, Spec: spec}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(o.out, upStateName), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// runUp runs a whole farm in this process: an embedded NATS server, the
// coordinator's publish, workers and the learner, until every job has a
// trajectory and every group its shard; then it scores the run.
func runUp(ctx context.Context, e *env, o *upOptions) (err error) {
	p, err := o.plan(e)
	if err != nil {
		return err
	}
	// A command that fails before its farm starts leaves no files behind.
	_, statErr := os.Stat(o.out)
	started := false
	defer func() {
		if err != nil && !started && errors.Is(statErr, fs.ErrNotExist) {
			_ = os.RemoveAll(o.out)
		}
	}()
	datasetFlag := o.datasetPath
	if o.datasetPath == "" {
		if o.datasetPath, o.reposDir, err = writeSample(filepath.Join(o.out, "sample")); err != nil {
			return err
		}
	}
	goldCfg, err := e.goldConfig(o.datasetPath, o.reposDir)
	if err != nil {
		return err
	}
	goldCfg.WithRequirements = o.withRequirements
	report, err := coordinator.RunGold(ctx, goldCfg)
	if err != nil {
		return err
	}
	if err := o.writeState(p.spec, datasetFlag); err != nil {
		return err
	}
	started = true // from here on the folder holds a run to resume
	eb, err := startEmbeddedBus(ctx, filepath.Join(o.out, "nats"))
	if err != nil {
		return err
	}
	defer eb.close()
	nc, b := eb.nc, eb.bus
	instruments, stopMetrics, err := o.metrics.start(ctx, e, nc, b)
	if err != nil {
		return err
	}
	defer stopMetrics()
	instruments.WatchReplicas(replicaMetrics(p.policies))
	pub, err := coordinator.Publish(ctx, coordinator.RunConfig{Bus: b, RunID: o.runID, Instances: report.Instances,
		Gold: report.Locations(), Samples: o.samples, Spec: p.spec})
	if err != nil {
		return err
	}
	// The page follows the run, so it starts once the run exists.
	stopPage, err := o.startStatusPage(ctx, e, b)
	if err != nil {
		return err
	}
	defer stopPage()
	e.log.Info().Str("run", o.runID).Int("jobs", pub.Queued).Msg("jobs published")

	repos := gitrepo.NewSet(o.reposDir)
	defer repos.Close()
	learnerOut := filepath.Join(o.out, "learner")
	roles := startRoles(ctx, o.workers, func(ctx context.Context, i int) error {
		return worker.Run(ctx, worker.Config{Bus: b, Repos: repos, Policies: p.policies, Index: p.index,
			Grace: max(o.grace, time.Millisecond), Abort: e.abort, // worker.Config's zero grace is its default
			Concurrency: o.concurrency, LocalIndexes: o.localIndexes, WorkerID: fmt.Sprintf("up-%d", i), Version: version(), Log: e.log,
			OutageBudget: o.endpoints.outageBudget,
			OnTrajectory: instruments.ObserveTrajectory, OnIndex: instruments.IndexReady, OnIndexMemory: instruments.IndexMemory,
			OnHandOff: instruments.HandedOff})
	}, func(ctx context.Context, closed func()) error {
		return learner.Serve(ctx, learner.ServiceConfig{Bus: b, Out: learnerOut, Learner: p.learn, Log: e.log,
			OnGroupClosed: func(_ string, _ int64, _ string, _, rows int) {
				instruments.GroupClosed(rows)
				closed()
			}})
	}, func() bool { // the learner has archived every trajectory in the log
		st, err := coordinator.Status(context.WithoutCancel(ctx), b, o.runID, time.Now())
		return err == nil && st.Learner.Backlog == 0 && st.Learner.Unacked == 0
	})
	defer roles.stop()
	waitErr := waitUp(ctx, e, b, pub.Manifest, report.Instances, roles)
	interrupted := waitErr != nil && ctx.Err() != nil
	if waitErr != nil && !interrupted {
		return waitErr
	}
	roles.stop()
	// The archive is read once: for the table printed here and the report.
	src, err := runreport.Load(o.out)
	if interrupted && err != nil {
		return &interruptedError{fmt.Sprintf("no trajectory was archived yet; continue with the same command and --resume (--out %s)", o.out)}
	}
	if err != nil {
		return err
	}
	if !interrupted {
		if err := scoreUp(e, o.runID, learnerOut, report, src.Trajectories); err != nil {
			return err
		}
	}
	path, err := writeReport(e, []*runreport.Source{src}, runreport.Options{Learner: p.learn, Languages: e.languages}, "", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "report written: %s\n", path)
	if interrupted {
		answered := 0
		for _, tr := range src.Trajectories {
			if tr.RunID == o.runID && tr.Iteration == 0 && !tr.Fork.IsBranch() {
				answered++
			}
		}
		return &interruptedError{fmt.Sprintf("%d of %d jobs of run %s answered and archived in %s; continue with the same command and --resume",
			answered, pub.Manifest.Expected, o.runID, filepath.Join(learnerOut, "archive"))}
	}
	if o.httpAddr != "" {
		fmt.Fprintln(e.stdout, "the run is done; the status page stays up until interrupted")
		<-ctx.Done()
	}
	return nil
}

// startStatusPage serves the live page when --http is set; stop ends it
// and waits for it.
func (o *upOptions) startStatusPage(ctx context.Context, e *env, b *bus.Bus) (stop func(), err error) {
	if o.httpAddr == "" {
		return func() {}, nil
	}
	serve, err := statusPage(e, o.httpAddr, b, o.runID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			e.log.Warn().Err(err).Msg("status page")
		}
	}, nil
}

// writeSample writes the built-in sample (dataset and repositories) into
// dir, afresh.
func writeSample(dir string) (datasetPath, reposDir string, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", "", err
	}
	l, err := sample.Write(dir)
	if err != nil {
		return "", "", err
	}
	return l.Dataset, l.ReposDir, nil
}

// upRoles are the workers and the learner that up runs in goroutines.
type upRoles struct {
	cancelWorkers, cancelLearner context.CancelFunc
	workers, learner             sync.WaitGroup
	// drained reports whether the learner has archived every trajectory
	// the workers published.
	drained func() bool
	errs    chan error
	closed  atomic.Int64 // groups the learner has sharded
	once    sync.Once
}

// learnerDrainLimit bounds how long a stopping up waits for the learner
// to archive the trajectories the workers published last.
const learnerDrainLimit = 10 * time.Second

// startRoles runs the workers under ctx (a stop request starts their
// two-phase stop) and the learner until stop has stopped the workers and
// the learner has archived what they published.
func startRoles(ctx context.Context, workers int, work func(context.Context, int) error, learn func(context.Context, func()) error, drained func() bool) *upRoles {
	workCtx, cancelWorkers := context.WithCancel(ctx)
	learnCtx, cancelLearner := context.WithCancel(context.WithoutCancel(ctx))
	r := &upRoles{cancelWorkers: cancelWorkers, cancelLearner: cancelLearner, drained: drained, errs: make(chan error, workers+1)}
	run := func(wg *sync.WaitGroup, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				r.errs <- err
			}
		}()
	}
	for i := range workers {
		run(&r.workers, func() error { return work(workCtx, i) })
	}
	run(&r.learner, func() error { return learn(learnCtx, func() { r.closed.Add(1) }) })
	return r
}

// embeddedBus is an in-process NATS server with JetStream, a connection
// to it and the farm's topology on it: what up and iterate run their roles
// over.
type embeddedBus struct {
	ns  *server.Server
	nc  *nats.Conn
	bus *bus.Bus
}

func startEmbeddedBus(ctx context.Context, storeDir string) (*embeddedBus, error) {
	ns, err := embednats.Start(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoLog: true})
	if err != nil {
		return nil, err
	}
	eb := &embeddedBus{ns: ns}
	if eb.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		embednats.Stop(ns)
		return nil, err
	}
	js, err := jetstream.New(eb.nc)
	if err == nil {
		eb.bus, err = bus.Open(ctx, js, bus.DefaultConfig())
	}
	if err != nil {
		eb.close()
		return nil, err
	}
	return eb, nil
}

func (eb *embeddedBus) close() {
	eb.nc.Close()
	embednats.Stop(eb.ns)
}

// stop stops the workers (two-phase inside each), lets the learner
// archive what they published last, then stops the learner.
func (r *upRoles) stop() {
	r.once.Do(func() {
		r.cancelWorkers()
		r.workers.Wait()
		for deadline := time.Now().Add(learnerDrainLimit); !r.drained() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		r.cancelLearner()
		r.learner.Wait()
	})
}

// waitUp shows progress until every expected job (branches included) has
// a trajectory and every group a shard, or a role fails. The run's
// branches are planned and published here, as the coordinator does.
func waitUp(ctx context.Context, e *env, b *bus.Bus, m *schema.RunManifest, instances []schema.Instance, roles *upRoles) error {
	report, finish := e.progress("rollouts")
	defer finish()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		answered <- coordinator.Wait(ctx, b, m, coordinator.WaitOptions{Instances: instances, Progress: report,
			OnError: func(err error) { e.log.Warn().Err(err).Msg("following the run") }})
	}()
	// Groups sharded before a resume are not closed again in this process:
	// the learner's report to status counts them.
	var asked time.Time
	allSharded := func() bool {
		asked = time.Now()
		st, err := coordinator.Status(ctx, b, m.RunID, asked)
		return err == nil && len(st.Runs) == 1 && st.Runs[0].Sharded >= st.Runs[0].Groups
	}
	done := false
	for {
		select {
		case err := <-answered:
			if err != nil {
				return err
			}
			done = true
		case err := <-roles.errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if done && (roles.closed.Load() >= int64(len(instances)) || time.Since(asked) >= time.Second && allSharded()) {
			return nil
		}
	}
}

// scoreUp evaluates the run's archived trajectories against its gold and
// prints the table.
func scoreUp(e *env, runID, learnerOut string, report *coordinator.GoldReport, archived []schema.Trajectory) error {
	// The policy is scored on its base samples: a branch's answer is
	// conditioned on a prefix it did not choose.
	var trs []schema.Trajectory
	branches, branchTurns := 0, 0
	for _, tr := range archived {
		switch {
		case tr.RunID != runID || tr.Iteration != 0:
		case tr.Fork.IsBranch():
			branches++
			branchTurns += len(tr.Turns) - tr.OwnTurns()
		default:
			trs = append(trs, tr)
		}
	}
	golds := report.Golds()
	var preds []schema.LocOutput
	for _, tr := range trs {
		preds = append(preds, tr.LocOutput())
	}
	rep, err := metrics.Evaluate(preds, golds, metrics.EvalOptions{Languages: e.languages})
	if err != nil {
		return err
	}
	for k, v := range metrics.TrajectoryStats(trs, golds, e.languages) {
		rep.Overall[k] = v
	}
	printReport(e, rep)
	fmt.Fprintf(e.stdout, "\nrun %s: %d trajectories archived in %s, shards in %s\n", runID, len(trs)+branches,
		filepath.Join(learnerOut, "archive"), filepath.Join(learnerOut, "shards"))
	if branches > 0 {
		fmt.Fprintf(e.stdout, "  scored above: the %d base samples; %d branches played %d turns of their own\n", len(trs), branches, branchTurns)
	}
	return nil
}

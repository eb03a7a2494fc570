package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/internal/tbevents"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/policy"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// iterateOptions are iterate's flags.
type iterateOptions struct {
	nats      natsFlags
	run       runFlags
	endpoints endpointFlags
	cache     cacheFlags
	learn     learnFlags

	runID, datasetPath, reposDir, out string
	evalDataset, evalRepos            string
	shardsDir, trainer, trainModel    string
	initAdapter, teacher              string
	teacherURLs                       []string
	teacherTries                      int
	iterations, samples               int
	workers, concurrency, evalSamples int
	resume                            bool
	trainerGrace, shardTimeout        time.Duration
	reportTo, loggingDir              string
}

func newIterateCmd(e *env) *cobra.Command {
	var o iterateOptions
	cmd := &cobra.Command{
		Use:   "iterate --run ID --dataset FILE --repos DIR --model BASE --base-url URL... --out DIR",
		Short: "Run rollout–training iterations: serve adapter k−1 on every replica, roll out, train adapter k, evaluate, report",
		Long: `iterate drives a run's iterations k = 1..--iterations against the policy server's
replicas (--base-url, repeated; vLLM started with --enable-lora and
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or the trainer's stand-in server):

  serve     adapter k−1 (--init-adapter for k = 1, else the one iteration k−1
            trained; none: the base model --model) is loaded on every replica under
            a name of its own, <run>-it<j>, and each replica must list it in
            /v1/models and answer a request with it before anything is published
  rollout   iteration k is published with that model (the jobs carry the
            adapter's path, so a replica that restarted and forgot it gets it loaded
            again), answered, and sharded by the learner
  train     the trainer command (--trainer, a template) trains adapter k on
            iteration k's shards, starting from adapter k−1, into DIR/adapters/it<k>
  evaluate  adapter k plays --eval-dataset greedily (one sample per instance)

With --teacher, a warm-up (iteration 0) comes first: the teacher (any model an
OpenAI-compatible server serves, --teacher-url; or heuristic, the built-in policy)
plays the training set, the instances none of whose trajectories matches the gold
at every level are played again (--teacher-tries in all), the best trajectory of
each solved instance becomes SFT shards (DIR/warmup/shards, as replay --sft writes
them) and the trainer ({sft} set) trains adapter 0 from the base model.

iterate writes DIR/report.jsonl, one row per iteration (F1 per level, discovery–commit
gap, advantages and weights, trainer loss, seconds per step).

Without --nats the farm is embedded: NATS, --workers workers and a learner run in
this process (the learner writes DIR/learner). With --nats the workers and the
learner of a running farm do the work, and --shards names the learner's shards
folder. The adapters' paths must be readable by the replicas.

The driver's state is DIR/iterate.json: Ctrl-C exits 130 and --resume continues at
the step it stopped in, never repeating a finished one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runIterate(cmd.Context(), e, &o) },
	}
	o.nats.bind(cmd)
	o.run.bind(cmd, "openai")
	o.endpoints.bind(cmd)
	o.cache.bind(cmd)
	o.learn.bind(cmd, e)
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.runID, "run", "", "run id; adapter j is served as <run>-it<j>")
	f.StringVar(&o.datasetPath, "dataset", "", "training set: dataset JSONL or Parquet")
	f.StringVar(&o.reposDir, "repos", envOr("A2FARM_REPOS", ""), "repositories named owner__name (env A2FARM_REPOS)")
	f.StringVar(&o.out, "out", "", "the driver's folder: state, adapters, evaluations, report")
	f.IntVar(&o.iterations, "iterations", 3, "rollout–training iterations")
	f.IntVar(&o.samples, "samples", 8, "rollouts per instance and iteration")
	f.StringVar(&o.trainer, "trainer", iterate.DefaultTrainer, "trainer command template, run by /bin/sh; placeholders {model} {init} {out} {shards} {run} {iteration} {resume} {sft} {report}")
	f.StringVar(&o.trainModel, "train-model", "", "the base model the trainer loads (a Hugging Face folder or name; default --model)")
	f.StringVar(&o.initAdapter, "init-adapter", "", "adapter 0 (the SFT warm-up's), served for iteration 1 and trained from")
	f.StringVar(&o.teacher, "teacher", "", "warm-up first: this model (or heuristic, the built-in policy) plays the training set, and adapter 0 is trained on its SFT shards")
	f.StringArrayVar(&o.teacherURLs, "teacher-url", nil, "OpenAI-compatible API root serving --teacher (repeatable; default: the --base-url replicas)")
	f.IntVar(&o.teacherTries, "teacher-tries", 5, "warm-up: times an instance is played until a teacher trajectory matches the gold at every level")
	f.StringVar(&o.evalDataset, "eval-dataset", "", "held-out dataset each adapter plays greedily (none: no evaluation)")
	f.StringVar(&o.evalRepos, "eval-repos", "", "repositories of --eval-dataset (default --repos)")
	f.IntVar(&o.evalSamples, "eval-samples", 1, "greedy samples per held-out instance")
	f.StringVar(&o.shardsDir, "shards", "", "with --nats: the running learner's shards folder (its --out/shards)")
	f.IntVar(&o.workers, "workers", 2, "embedded farm: workers")
	f.IntVar(&o.concurrency, "concurrency", 8, "episodes in flight per worker (and in the evaluation)")
	f.BoolVar(&o.resume, "resume", false, "continue the driver's state in --out")
	f.DurationVar(&o.trainerGrace, "trainer-grace", 2*time.Minute, "after Ctrl-C, how long the trainer may take to save its checkpoint before it is killed")
	f.DurationVar(&o.shardTimeout, "shard-timeout", 10*time.Minute, "how long to wait for the learner to shard an iteration once every job has a trajectory")
	f.StringVar(&o.reportTo, "report-to", "none", "tensorboard: one dashboard for the loop — each iteration's rollout, training and evaluation, and the trainer's steps ({report}) — in --logging-dir; none: no dashboard")
	f.StringVar(&o.loggingDir, "logging-dir", "", "the dashboard's folder (default <out>/logs; tensorboard --logdir it)")
	return cmd
}

// iteratePlan is what iterate.json records of the flags that decide the
// run's data: a resume with other values is refused. The trainer command,
// the replicas' URLs and the number of iterations may change on resume (a
// fixed trainer, a moved server, one iteration more).
type iteratePlan struct {
	Run, Dataset, Repos, Model, TrainModel, InitAdapter string
	EvalDataset, Shards                                 string
	Teacher                                             string `json:",omitempty"`
	TeacherTries                                        int    `json:",omitempty"`
	Languages                                           string `json:",omitempty"`
	Samples, EvalSamples                                int
	Spec                                                schema.RunSpec
}

func runIterate(ctx context.Context, e *env, o *iterateOptions) (err error) {
	if err := required("run", o.runID, "dataset", o.datasetPath, "repos", o.reposDir, "out", o.out); err != nil {
		return err
	}
	if err := inputs("dataset", o.datasetPath, "repos", o.reposDir); err != nil {
		return err
	}
	for _, c := range []error{checkRange("iterations", o.iterations, 1, 100), checkSamples(o.samples), checkRange("eval-samples", o.evalSamples, 1, worker.MaxSamples),
		checkRange("workers", o.workers, 1, 256), checkConcurrency(o.concurrency)} {
		if c != nil {
			return c
		}
	}
	if o.evalDataset != "" {
		if err := inputs("eval-dataset", o.evalDataset); err != nil {
			return err
		}
	}
	if o.evalRepos == "" {
		o.evalRepos = o.reposDir
	}
	if err := o.checkTeacher(); err != nil {
		return err
	}
	dash, err := o.dashboard()
	if err != nil {
		return err
	}
	if o.initAdapter != "" {
		if err := isAdapter(o.initAdapter); err != nil {
			return usagef("--init-adapter %s: %v", o.initAdapter, err)
		}
		if o.initAdapter, err = filepath.Abs(o.initAdapter); err != nil {
			return err
		}
	}
	external := o.shardsDir != ""
	if !external && o.nats.cmd.Flags().Changed("nats") {
		return usagef("--nats needs --shards: the running farm's learner writes the shards the trainer reads (without both, the farm is embedded)")
	}
	spec, err := o.run.spec()
	if err != nil {
		return err
	}
	if spec.Policy.Kind != schema.PolicyOpenAI {
		return usagef("--policy %s: iterate serves adapters, so its policy is openai (--model names the base model)", spec.Policy.Kind)
	}
	if o.trainModel == "" {
		o.trainModel = spec.Policy.Model
	}
	if _, err := iterate.TrainerCommand(o.trainer, iterate.TrainerVars{Out: "x"}); err != nil {
		return usagef("--trainer: %v", err)
	}
	replicas, err := o.replicas()
	if err != nil {
		return err
	}
	for _, u := range o.teacherURLs { // the teacher's own servers; without them the replicas serve it
		o.endpoints.endpoints = append(o.endpoints.endpoints, o.teacher+"="+u)
	}
	policies, err := o.endpoints.registry()
	if err != nil {
		return err
	}
	index, err := o.cache.options(e.languages)
	if err != nil {
		return err
	}
	learn, err := o.learn.config()
	if err != nil {
		return err
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	plan := iteratePlan{Run: o.runID, Dataset: o.datasetPath, Repos: o.reposDir, Model: spec.Policy.Model, TrainModel: o.trainModel,
		InitAdapter: o.initAdapter, EvalDataset: o.evalDataset, Shards: o.shardsDir, Samples: o.samples, EvalSamples: o.evalSamples, Spec: spec}
	if o.teacher != "" {
		plan.Teacher, plan.TeacherTries = o.teacher, o.teacherTries
	}
	sel, err := e.selection()
	if err != nil {
		return err
	}
	plan.Languages = sel.String()
	if st, err := iterate.Load(o.out); err != nil {
		return err
	} else if st != nil && !o.resume {
		return usagef("--out %s holds an iterate run (iterate.json): pass --resume to continue it, or use another folder", o.out)
	} else if st == nil && o.resume {
		return usagef("--resume: %s holds no iterate run", o.out)
	}

	goldCfg, err := e.goldConfig(o.datasetPath, o.reposDir)
	if err != nil {
		return err
	}
	report, err := coordinator.RunGold(ctx, goldCfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	s := &iterateSteps{e: e, o: o, spec: spec, replicas: replicas, policies: policies, index: index, gold: report, learn: learn}

	var farm *embeddedFarm
	if !external {
		farm, err = startEmbeddedFarm(ctx, e, filepath.Join(o.out, "farm"), o.workers, o.concurrency, policies, index, learn, o.reposDir)
		if err != nil {
			return err
		}
		defer farm.stop()
		s.bus, s.shards, s.farmFailed = farm.bus, filepath.Join(farm.learnerOut, "shards"), farm.failed
	} else {
		member, err := joinFarm(ctx, e, &o.nats, &metricsFlags{}, "iterate")
		if err != nil {
			return err
		}
		defer member.leave()
		s.bus, s.shards = member.bus, o.shardsDir
	}

	s.logs = dash.dir
	defer dash.close(e)
	ranNow := map[int]bool{} // iterations with a step run by this process: the dashboard has the others already

	reportPath := filepath.Join(o.out, "report.jsonl")
	initial := iterate.Base
	if o.initAdapter != "" {
		initial = iterate.Adapter{Version: 0, Path: o.initAdapter}
	}
	rows, err := iterate.Run(ctx, iterate.Config{Dir: o.out, Iterations: o.iterations, Warmup: o.teacher != "", Plan: plan,
		Resume: o.resume, Initial: initial, Steps: s,
		OnStep: func(k int, step iterate.Step, finished bool, err error) {
			switch {
			case !finished && err == nil:
				fmt.Fprintf(e.stderr, "%s: %s…\n", iterationName(k), step)
			case finished:
				fmt.Fprintf(e.stderr, "%s: %s done\n", iterationName(k), step)
				ranNow[k] = true
			}
		},
		OnRow: func(r iterate.Row) {
			printIterationRow(e, r)
			if ranNow[r.Iteration] {
				dash.row(e, r)
			}
		}})
	if werr := writeIterateReport(reportPath, rows); werr != nil && err == nil {
		err = werr
	}
	var step *iterate.StepError
	switch {
	case err == nil:
		fmt.Fprintf(e.stdout, "%d iterations done; report %s\n", o.iterations, reportPath)
		return nil
	case ctx.Err() != nil:
		where := "before the first step"
		if errors.As(err, &step) {
			where = fmt.Sprintf("in iteration %d, step %s", step.Iteration, step.Step)
		}
		return &interruptedError{fmt.Sprintf("stopped %s; the same command with --resume continues there (state %s)",
			where, filepath.Join(o.out, iterate.StateName))}
	case errors.As(err, &step):
		return fmt.Errorf("%w (fix it, then the same command with --resume continues at this step)", err)
	case errors.Is(err, iterate.ErrStateExists):
		return &usageError{err}
	default:
		var pm *iterate.PlanMismatchError
		if errors.As(err, &pm) {
			return &usageError{err}
		}
		return err
	}
}

// iterationName is how messages name iteration k.
func iterationName(k int) string {
	if k == 0 {
		return "iteration 0 (warm-up)"
	}
	return fmt.Sprintf("iteration %d", k)
}

// checkTeacher checks the warm-up's flags.
func (o *iterateOptions) checkTeacher() error {
	switch {
	case o.teacher == "" && (len(o.teacherURLs) > 0 || o.nats.cmd.Flags().Changed("teacher-tries")):
		return usagef("--teacher-url and --teacher-tries configure the warm-up: give --teacher MODEL (or heuristic)")
	case o.teacher == "":
		return nil
	case o.initAdapter != "":
		return usagef("--teacher trains adapter 0 and --init-adapter gives it: pass one of them")
	case o.teacher == TeacherHeuristic && len(o.teacherURLs) > 0:
		return usagef("--teacher heuristic is built in: it needs no --teacher-url")
	}
	return checkRange("teacher-tries", o.teacherTries, 1, 100)
}

// replicas are the servers adapters are loaded onto: the --base-url ones.
func (o *iterateOptions) replicas() ([]iterate.Replica, error) {
	if len(o.endpoints.endpoints) > 0 {
		return nil, usagef("iterate loads adapters onto --base-url replicas (any model name); --endpoint MODEL=URL serves fixed names")
	}
	var out []iterate.Replica
	for _, u := range o.endpoints.baseURLs {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		c, err := llm.New(llm.Config{BaseURL: u, APIKey: os.Getenv(o.endpoints.keyEnv), Timeout: o.endpoints.timeout, MaxRetries: 2})
		if err != nil {
			return nil, &usageError{err}
		}
		out = append(out, iterate.Replica{Name: policy.RedactURL(u), Client: c})
	}
	if len(out) == 0 {
		return nil, usagef("iterate needs the policy server's replicas: --base-url URL, once per replica")
	}
	return out, nil
}

// isAdapter checks that dir holds a PEFT adapter.
func isAdapter(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err != nil {
		return errors.New("no adapter_config.json (not a PEFT adapter folder)")
	}
	return nil
}

// dashboard writes each iteration's row as TensorBoard scalars (step =
// iteration) into dir/iterate, beside the trainer's runs dir/it<k>; with
// --report-to none it writes nothing (dir empty).
type dashboard struct {
	dir string
	w   *tbevents.Writer
}

func (o *iterateOptions) dashboard() (*dashboard, error) {
	switch o.reportTo {
	case "none":
		return &dashboard{}, nil
	case "tensorboard":
		dir := o.loggingDir
		if dir == "" {
			dir = filepath.Join(o.out, "logs")
		}
		abs, err := filepath.Abs(dir)
		return &dashboard{dir: abs}, err
	}
	return nil, usagef("--report-to %q: want tensorboard or none (iterate writes TensorBoard's files; wandb sync --sync-tensorboard takes them to wandb)", o.reportTo)
}

// row plots r; a dashboard that cannot be written is said once, and the
// loop goes on (it is a view of report.jsonl, not the record).
func (d *dashboard) row(e *env, r iterate.Row) {
	if d.dir == "" {
		return
	}
	err := d.open()
	scalars := r.Scalars()
	tags := slices.Sorted(maps.Keys(scalars))
	for _, tag := range tags {
		if err == nil {
			err = d.w.Scalar(tag, int64(r.Iteration), scalars[tag])
		}
	}
	if err == nil {
		err = d.w.Flush()
	}
	if err != nil {
		e.log.Warn().Err(err).Str("dir", d.dir).Msg("dashboard not written; report.jsonl has the figures")
		d.dir = ""
	}
}

func (d *dashboard) open() error {
	if d.w != nil {
		return nil
	}
	w, err := tbevents.Create(filepath.Join(d.dir, "iterate"))
	d.w = w
	return err
}

func (d *dashboard) close(e *env) {
	if d.w != nil {
		if err := d.w.Close(); err != nil {
			e.log.Warn().Err(err).Msg("dashboard not closed cleanly")
		}
	}
}

// iterateSteps does iterate's steps against a farm.
type iterateSteps struct {
	e        *env
	o        *iterateOptions
	spec     schema.RunSpec
	replicas []iterate.Replica
	policies *policy.Registry
	index    repoindex.BuildOptions
	gold     *coordinator.GoldReport
	evalGold *coordinator.GoldReport // --eval-dataset's, extracted at its first evaluation
	learn    learner.Config
	bus      *bus.Bus
	shards   string // the learner's shards tree
	logs     string // the dashboard's folder, handed to the trainer as {report}; empty: none
	// farmFailed: an embedded farm's roles report a fatal error here (nil
	// for a running farm's, whose operator sees them).
	farmFailed <-chan error
}

// adapterDir is where iteration k's finished adapter is: the trainer writes
// it aside (adapterDir + ".partial") and the step renames it here once the
// trainer has exited 0, so a folder here is always whole.
func (s *iterateSteps) adapterDir(k int) string {
	return filepath.Join(s.o.out, "adapters", fmt.Sprintf("it%d", k))
}

// policyOf is the run spec's policy with adapter a (or the base model).
func (s *iterateSteps) policyOf(a iterate.Adapter) schema.Policy {
	p := s.spec.Policy
	if a.Version >= 0 {
		p.Model, p.Adapter, p.Version = iterate.AdapterName(s.o.runID, a.Version), a.Path, fmt.Sprintf("it%d", a.Version)
	} else {
		p.Version = "base"
	}
	return p
}

// Serve loads adapter a on every replica and confirms it there, then
// unloads the run's older versions: in the synchronous loop iteration k's
// rollouts, and adapter k−1's evaluation, are finished before iteration
// k+1 is served, so only a acts from here on.
func (s *iterateSteps) Serve(ctx context.Context, k int, a iterate.Adapter, older []iterate.Adapter) error {
	if a.Version < 0 {
		for _, r := range s.replicas {
			if err := iterate.Confirm(ctx, r, s.spec.Policy.Model, ""); err != nil {
				return fmt.Errorf("replica %s: %w", r.Name, err)
			}
		}
		return nil
	}
	if err := iterate.Deploy(ctx, s.replicas, iterate.AdapterName(s.o.runID, a.Version), a.Path); err != nil {
		return err
	}
	names := make([]string, len(older))
	for i, o := range older {
		names[i] = iterate.AdapterName(s.o.runID, o.Version)
	}
	return iterate.Retire(ctx, s.replicas, names)
}

func (s *iterateSteps) Rollout(ctx context.Context, k int, a iterate.Adapter) (iterate.RolloutResult, error) {
	if k == 0 {
		return s.warmup(ctx)
	}
	ctx, stop := s.whileTheFarmRuns(ctx)
	r, err := s.rollout(ctx, k, a)
	return r, stop(err)
}

// whileTheFarmRuns gives a context that ends when a role of the embedded
// farm stops with an error (no worker or learner is left to finish the
// rollout), and a function that turns the step's error into that one.
func (s *iterateSteps) whileTheFarmRuns(ctx context.Context) (context.Context, func(error) error) {
	if s.farmFailed == nil {
		return ctx, func(err error) error { return err }
	}
	roleCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case err := <-s.farmFailed:
			cancel(fmt.Errorf("the embedded farm stopped: %w", err))
		case <-roleCtx.Done():
		}
	}()
	return roleCtx, func(err error) error {
		defer cancel(nil)
		if cause := context.Cause(roleCtx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
}

func (s *iterateSteps) rollout(ctx context.Context, k int, a iterate.Adapter) (iterate.RolloutResult, error) {
	spec := s.spec
	spec.Policy = s.policyOf(a)
	progress, finish := s.e.progress("published")
	pub, err := coordinator.Publish(ctx, coordinator.RunConfig{Bus: s.bus, RunID: s.o.runID, Iteration: int64(k),
		Instances: s.gold.Instances, Gold: s.gold.Locations(), Samples: s.o.samples, Spec: spec, Progress: progress})
	finish()
	if err != nil {
		return iterate.RolloutResult{}, err
	}
	if !pub.Complete {
		if err := waitForRun(ctx, s.e, s.bus, pub.Manifest, s.gold.Instances, 0); err != nil {
			return iterate.RolloutResult{}, err
		}
	}
	if err := s.waitSharded(ctx, k); err != nil {
		return iterate.RolloutResult{}, err
	}
	r, err := shardStats(filepath.Join(s.shards, s.o.runID, fmt.Sprint(k)))
	r.Model, r.Jobs = spec.Policy.Model, pub.Manifest.Expected
	return r, err
}

// waitSharded waits until the learner reports every group of iteration k
// sharded.
func (s *iterateSteps) waitSharded(ctx context.Context, k int) error {
	deadline := time.Now().Add(s.o.shardTimeout)
	said := false
	for {
		st, err := coordinator.Status(ctx, s.bus, s.o.runID, time.Now())
		if err == nil {
			for _, r := range st.Runs {
				if r.Iteration == int64(k) && r.Groups > 0 && r.Sharded >= r.Groups {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the learner has not sharded iteration %d within --shard-timeout %s (is a learner running? a2farm status --run %s)", k, s.o.shardTimeout, s.o.runID)
		}
		if !said {
			fmt.Fprintf(s.e.stderr, "iteration %d: every job answered; waiting for the learner to shard its groups\n", k)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *iterateSteps) Train(ctx context.Context, k int, init iterate.Adapter, rollout iterate.RolloutResult) (iterate.TrainResult, error) {
	if k == 0 {
		return s.trainWarmup(ctx, rollout)
	}
	if rollout.Rows == 0 {
		return iterate.TrainResult{Adapter: init.Path, Skipped: fmt.Sprintf("iteration %d wrote no training row (no turn carries a weight): adapter %d is adapter %d", k, k, k-1)}, nil
	}
	return s.runTrainer(ctx, k, iterate.TrainerVars{Model: s.o.trainModel, Init: init.Path, Shards: s.shards, Run: s.o.runID, Iteration: k})
}

// runTrainer trains adapter k with the trainer command into a folder
// aside, and renames it into adapterDir(k) once the trainer has exited 0
// with an adapter there. A resumed step finds a renamed adapter finished;
// aside it keeps only a2farm-train's finished adapter (a2farm-train writes
// its manifest last and renames the whole folder into place) — whatever
// another trainer left there may be half-written and is trained again. A
// checkpoint an interrupted trainer left is handed on as {resume}.
func (s *iterateSteps) runTrainer(ctx context.Context, k int, v iterate.TrainerVars) (iterate.TrainResult, error) {
	final := s.adapterDir(k)
	if isAdapter(final) == nil {
		return trainStats(final)
	}
	v.Out, v.Logs = final+".partial", s.logs
	if _, err := os.Stat(filepath.Join(v.Out, trainManifestName)); err != nil {
		if err := os.RemoveAll(v.Out); err != nil {
			return iterate.TrainResult{}, err
		}
		_, ckptErr := os.Stat(v.Out + ".checkpoint")
		v.Resume = ckptErr == nil
		line, err := iterate.TrainerCommand(s.o.trainer, v)
		if err != nil {
			return iterate.TrainResult{}, err
		}
		fmt.Fprintf(s.e.stderr, "%s: %s\n", iterationName(k), line)
		if err := iterate.RunTrainer(ctx, line, s.e.stderr, s.o.trainerGrace); err != nil {
			return iterate.TrainResult{}, err
		}
	}
	if err := isAdapter(v.Out); err != nil {
		return iterate.TrainResult{}, fmt.Errorf("the trainer exited 0 but %s holds no adapter: %v", v.Out, err)
	}
	if err := os.Rename(v.Out, final); err != nil {
		return iterate.TrainResult{}, fmt.Errorf("install adapter %d: %w", k, err)
	}
	return trainStats(final)
}

// trainManifestName is the record a2farm-train writes into a finished
// adapter.
const trainManifestName = "train_manifest.json"

// localize plays cfg's instances in the driver's process, as the warm-up
// and the evaluation do, into out (continued where an interrupted run left
// it), with this process's policies, index options and limits.
func (s *iterateSteps) localize(ctx context.Context, label, out, reposDir string, cfg worker.LocalizeConfig) (worker.LocalizeResult, error) {
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	_, statErr := os.Stat(out)
	progress, finish := s.e.progress(label)
	defer finish()
	cfg.Repos, cfg.Policies, cfg.Index, cfg.Concurrency, cfg.Out, cfg.Resume = repos, s.policies, s.index, s.o.concurrency, out, statErr == nil
	cfg.Grace, cfg.Abort, cfg.Log, cfg.Progress, cfg.OutageBudget = worker.DefaultLocalizeGrace, s.e.abort, s.e.log, progress, s.o.endpoints.outageBudget
	return worker.Localize(ctx, cfg)
}

func (s *iterateSteps) Evaluate(ctx context.Context, k int, a iterate.Adapter) (iterate.EvalResult, bool, error) {
	if s.o.evalDataset == "" {
		return iterate.EvalResult{}, false, nil
	}
	if a.Version >= 0 {
		if err := iterate.Deploy(ctx, s.replicas, iterate.AdapterName(s.o.runID, a.Version), a.Path); err != nil {
			return iterate.EvalResult{}, false, err
		}
	}
	spec := s.spec
	spec.Policy = s.policyOf(a)
	spec.Sampling.Temperature, spec.Sampling.TopP = 0, 0
	spec.Branching = schema.Branching{}
	if s.evalGold == nil { // the held-out set's gold is the same for every iteration
		cfg, err := s.e.goldConfig(s.o.evalDataset, s.o.evalRepos)
		if err != nil {
			return iterate.EvalResult{}, false, err
		}
		g, err := coordinator.RunGold(ctx, cfg)
		if err != nil {
			return iterate.EvalResult{}, false, err
		}
		s.evalGold = g
	}
	res, err := s.localize(ctx, "evaluation", filepath.Join(s.o.out, "eval", fmt.Sprintf("it%d", k)), s.o.evalRepos,
		worker.LocalizeConfig{Instances: s.evalGold.Instances, Spec: spec, Samples: s.o.evalSamples})
	if err != nil {
		return iterate.EvalResult{}, false, err
	}
	gs := s.evalGold.Golds()
	preds := make([]schema.LocOutput, len(res.Trajectories))
	for i, tr := range res.Trajectories {
		preds[i] = tr.LocOutput()
	}
	rep, err := metrics.Evaluate(preds, gs, metrics.EvalOptions{Languages: s.e.languages})
	if err != nil {
		return iterate.EvalResult{}, false, err
	}
	stats := metrics.TrajectoryStats(res.Trajectories, gs, s.e.languages)
	r := iterate.EvalResult{Instances: rep.Instances, F1: map[string]float64{}, Precision: map[string]float64{},
		Recall: map[string]float64{}, DCGapFile: stats["file.dc_gap"]}
	for _, level := range []string{"file", "module", "function"} {
		r.F1[level] = rep.Overall[level+".f1"]
		r.Precision[level] = rep.Overall[level+".precision@k"]
		r.Recall[level] = rep.Overall[level+".recall@k"]
	}
	return r, true, nil
}

// shardStats sums the learner's manifests of one run iteration.
func shardStats(dir string) (iterate.RolloutResult, error) {
	var r iterate.RolloutResult
	var advSum, advSq, dcSum, wSum float64
	var wN int
	paths, err := filepath.Glob(filepath.Join(dir, "*", shard.ManifestName))
	if err != nil {
		return r, err
	}
	for _, p := range paths {
		m, err := learner.ReadShardManifest(filepath.Dir(p))
		if err != nil {
			return r, err
		}
		r.Groups++
		r.Rows += m.Rows
		d := m.Diagnostics
		r.Trajectories += d.Trajectories
		r.Steps += d.Steps
		n := float64(d.Steps)
		advSum += d.AdvantageMean * n
		advSq += (d.AdvantageStd*d.AdvantageStd + d.AdvantageMean*d.AdvantageMean) * n
		dcSum += d.DCGapFile * float64(d.Trajectories)
		for i, c := range d.WeightHistogram {
			wSum += (float64(i) + 0.5) * 0.25 * float64(c)
			wN += c
		}
	}
	if r.Steps > 0 {
		r.AdvantageMean = advSum / float64(r.Steps)
		r.AdvantageStd = math.Sqrt(max(0, advSq/float64(r.Steps)-r.AdvantageMean*r.AdvantageMean))
	}
	if r.Trajectories > 0 {
		r.DCGapFile = dcSum / float64(r.Trajectories)
	}
	if wN > 0 {
		r.WeightMean = wSum / float64(wN)
	}
	return r, nil
}

// trainStats reads what the trainer's manifest says of a run.
func trainStats(dir string) (iterate.TrainResult, error) {
	data, err := os.ReadFile(filepath.Join(dir, trainManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return iterate.TrainResult{Adapter: dir}, nil // trained by another trainer: no figures
	}
	if err != nil {
		return iterate.TrainResult{}, err
	}
	var m struct {
		Steps []struct {
			Loss    float64 `json:"loss"`
			Seconds float64 `json:"seconds"`
		} `json:"steps"`
		TokensPerSecond float64 `json:"tokens_per_second"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return iterate.TrainResult{}, fmt.Errorf("%s: %w", filepath.Join(dir, trainManifestName), err)
	}
	r := iterate.TrainResult{Adapter: dir, Steps: len(m.Steps), TokensPerSecond: m.TokensPerSecond}
	if n := len(m.Steps); n > 0 {
		r.LossFirst, r.LossLast = m.Steps[0].Loss, m.Steps[n-1].Loss
		secs := 0.0
		for _, st := range m.Steps {
			secs += st.Seconds
		}
		r.SecondsPerStep = secs / float64(n)
	}
	return r, nil
}

func printIterationRow(e *env, r iterate.Row) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", iterationName(r.Iteration))
	if ro := r.Rollout; ro != nil && ro.Tries > 0 {
		fmt.Fprintf(&b, " teacher %s solved %d of %d instances in %d tries, %d SFT rows;", ro.Model, ro.Solved, ro.Instances, ro.Tries, ro.Rows)
	} else if ro != nil {
		fmt.Fprintf(&b, " rollout with %s: %d trajectories, %d rows, advantage %.3f±%.3f, weight %.2f, dc gap %.3f;",
			ro.Model, ro.Trajectories, ro.Rows, ro.AdvantageMean, ro.AdvantageStd, ro.WeightMean, ro.DCGapFile)
	}
	if t := r.Train; t != nil {
		if t.Skipped != "" {
			fmt.Fprintf(&b, " train skipped (%s);", t.Skipped)
		} else {
			fmt.Fprintf(&b, " train %d steps, loss %.4f → %.4f, %.2f s/step;", t.Steps, t.LossFirst, t.LossLast, t.SecondsPerStep)
		}
	}
	if ev := r.Eval; ev != nil {
		fmt.Fprintf(&b, " eval F1 file %.3f module %.3f function %.3f (%d instances)", ev.F1["file"], ev.F1["module"], ev.F1["function"], ev.Instances)
	}
	fmt.Fprintln(e.stdout, strings.TrimSuffix(b.String(), ";"))
}

// writeIterateReport writes report.jsonl whole or not at all: a reader (or
// a crash) never sees half of it.
func writeIterateReport(path string, rows []iterate.Row) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// embeddedFarm is NATS, workers and a learner in this process, up for
// every iteration.
type embeddedFarm struct {
	bus        *bus.Bus
	learnerOut string
	// failed receives the error of a worker or the learner that stopped.
	failed <-chan error
	stop   func()
}

func startEmbeddedFarm(ctx context.Context, e *env, dir string, workers, concurrency int, policies *policy.Registry,
	index repoindex.BuildOptions, learn learner.Config, reposDir string) (*embeddedFarm, error) {
	eb, err := startEmbeddedBus(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		return nil, err
	}
	b := eb.bus
	repos := gitrepo.NewSet(reposDir)
	learnerOut := filepath.Join(dir, "learner")
	// The roles run until the driver is done, not until Ctrl-C: a stopped
	// driver lets them finish their current work (two-phase stop).
	rolesCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	roles := startRoles(rolesCtx, workers, func(ctx context.Context, i int) error {
		return worker.Run(ctx, worker.Config{Bus: b, Repos: repos, Policies: policies, Index: index, Concurrency: concurrency,
			Grace: worker.DefaultLocalizeGrace, Abort: e.abort, WorkerID: fmt.Sprintf("iterate-%d", i), Version: version(), Log: e.log})
	}, func(ctx context.Context, closed func()) error {
		return learner.Serve(ctx, learner.ServiceConfig{Bus: b, Out: learnerOut, Learner: learn, Log: e.log,
			OnGroupClosed: func(string, int64, string, int, int) { closed() }})
	}, func() bool { return true })
	return &embeddedFarm{bus: b, learnerOut: learnerOut, failed: roles.errs, stop: func() {
		cancel()
		roles.stop()
		repos.Close()
		eb.close()
	}}, nil
}

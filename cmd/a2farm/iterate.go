package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/learner"
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
	maxStaleness, roundSize           int
	trainTries                        int
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
the step it stopped in, never repeating a finished one.

Asynchronous iterations (--max-staleness K ≥ 1, or --round-size M): the training
set is played in rounds of M instances (default: all of it), --iterations passes
over it. Round r is published with the newest adapter served on every replica,
as soon as its rows would be trained at a staleness of at most K (the adapters
trained between the one that played a row and the one it is trained into); the
trainer trains round r into adapter r, continuing the newest, while later rounds
play, and each new adapter is loaded under its own name and confirmed on every
replica. The adapter after each pass is evaluated beside the rollouts. K = 0
with --round-size plays the rounds in turn.`,
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
	f.DurationVar(&o.shardTimeout, "shard-timeout", iterate.DefaultShardTimeout, "how long to wait for the learner to shard an iteration once every job has a trajectory")
	f.StringVar(&o.reportTo, "report-to", "none", "tensorboard: one dashboard for the loop — each iteration's rollout, training and evaluation, and the trainer's steps ({report}) — in --logging-dir; none: no dashboard")
	f.StringVar(&o.loggingDir, "logging-dir", "", "the dashboard's folder (default <out>/logs; tensorboard --logdir it)")
	f.IntVar(&o.maxStaleness, "max-staleness", 0, "asynchronous iterations: rows are trained at most this many adapters after the one that played them, and rounds play while adapters train (0: the synchronous loop); may change on --resume")
	f.IntVar(&o.roundSize, "round-size", 0, "asynchronous iterations: instances per round (default: the whole training set)")
	f.IntVar(&o.trainTries, "train-tries", 3, "asynchronous iterations: times a round's training is run (from the checkpoint the failed try left) before its failure stops the loop")
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
	Async                                               bool   `json:",omitempty"`
	RoundSize                                           int    `json:",omitempty"`
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
		checkRange("workers", o.workers, 1, 256), checkConcurrency(o.concurrency),
		checkRange("max-staleness", o.maxStaleness, 0, 16), checkRange("round-size", o.roundSize, 0, 1_000_000), checkRange("train-tries", o.trainTries, 1, 100)} {
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
		if err := iterate.IsAdapter(o.initAdapter); err != nil {
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
	async := o.maxStaleness > 0 || o.roundSize > 0
	plan.Async, plan.RoundSize = async, o.roundSize
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
	fc := iterate.FarmConfig{Run: o.runID, Out: o.out, Spec: spec, Gold: report, Dataset: o.datasetPath, Repos: o.reposDir,
		Samples: o.samples, RoundSize: o.roundSize, Replicas: replicas, ShardTimeout: o.shardTimeout, Learn: learn,
		Trainer:   iterate.TrainerConfig{Command: o.trainer, Model: o.trainModel, Grace: o.trainerGrace},
		Teacher:   iterate.Teacher{Model: o.teacher, Tries: o.teacherTries},
		Player:    &localizer{e: e, policies: policies, index: index, concurrency: o.concurrency, outage: o.endpoints.outageBudget},
		Languages: e.languages, Progress: e.progress, Messages: e.stderr, Log: e.log, CodeVersion: version()}
	if o.evalDataset != "" {
		fc.Eval = iterate.Evaluation{Repos: o.evalRepos, Samples: o.evalSamples, Gold: func(ctx context.Context) (*coordinator.GoldReport, error) {
			cfg, err := e.goldConfig(o.evalDataset, o.evalRepos)
			if err != nil {
				return nil, err
			}
			return coordinator.RunGold(ctx, cfg)
		}}
	}
	if !external {
		farm, err := startEmbeddedFarm(ctx, e, filepath.Join(o.out, "farm"), o.workers, o.concurrency, policies, index, learn, o.reposDir)
		if err != nil {
			return err
		}
		defer farm.stop()
		fc.Bus, fc.Shards, fc.FarmFailed = farm.bus, filepath.Join(farm.learnerOut, "shards"), farm.failed
	} else {
		member, err := joinFarm(ctx, e, &o.nats, &metricsFlags{}, "iterate")
		if err != nil {
			return err
		}
		defer member.leave()
		fc.Bus, fc.Shards = member.bus, o.shardsDir
	}
	if dash != nil {
		fc.Trainer.Logs = dash.Dir
		defer func() {
			if err := dash.Close(); err != nil {
				e.log.Warn().Err(err).Msg("dashboard not closed cleanly")
			}
		}()
	}
	steps, err := iterate.NewFarm(fc)
	if err != nil {
		return err
	}

	initial := iterate.Base
	if o.initAdapter != "" {
		initial = iterate.Adapter{Version: 0, Path: o.initAdapter}
	}
	plotter := &rowPlotter{e: e, dash: dash, ranNow: map[int]bool{}}
	reportPath := filepath.Join(o.out, "report.jsonl")
	if async {
		rounds := iterate.RoundsPerPass(len(report.Instances), o.roundSize)
		rows, stats, err := iterate.RunRounds(ctx, iterate.RoundsConfig{Dir: o.out, Rounds: o.iterations * rounds, PerPass: rounds,
			MaxStaleness: o.maxStaleness, Warmup: o.teacher != "", Plan: plan, Resume: o.resume, Initial: initial, Steps: steps,
			TrainTries: o.trainTries, OnEvent: func(ev iterate.Event) { printRoundEvent(e, o.runID, ev, o.trainTries, plotter) },
			OnRow: plotter.row})
		if werr := iterate.WriteReport(reportPath, rows); werr != nil && err == nil {
			err = werr
		}
		if stats != nil {
			fmt.Fprintln(e.stdout, stats)
		}
		return iterateOutcome(ctx, e, o, err, fmt.Sprintf("%d rounds (%d passes of %d) done; report %s", o.iterations*rounds, o.iterations, rounds, reportPath))
	}
	rows, err := iterate.Run(ctx, iterate.Config{Dir: o.out, Iterations: o.iterations, Warmup: o.teacher != "", Plan: plan,
		Resume: o.resume, Initial: initial, Steps: steps,
		OnStep: func(k int, step iterate.Step, finished bool, err error) {
			switch {
			case !finished && err == nil:
				fmt.Fprintf(e.stderr, "%s: %s…\n", iterate.IterationName(k), step)
			case finished:
				fmt.Fprintf(e.stderr, "%s: %s done\n", iterate.IterationName(k), step)
				plotter.ranNow[k] = true
			}
		},
		OnRow: plotter.row})
	if werr := iterate.WriteReport(reportPath, rows); werr != nil && err == nil {
		err = werr
	}
	return iterateOutcome(ctx, e, o, err, fmt.Sprintf("%d iterations done; report %s", o.iterations, reportPath))
}

// rowPlotter prints each finished row and plots it on the dashboard when
// this process ran a step of it (the dashboard has the others already).
type rowPlotter struct {
	e      *env
	dash   *iterate.Dashboard
	ranNow map[int]bool
}

func (p *rowPlotter) row(r iterate.Row) {
	printIterationRow(p.e, r)
	if p.dash != nil && p.ranNow[r.Iteration] {
		if err := p.dash.Row(r); err != nil {
			p.e.log.Warn().Err(err).Str("dir", p.dash.Dir).Msg("dashboard not written; report.jsonl has the figures")
			p.dash = nil
		}
	}
}

// printRoundEvent says what a round's step does, with the rounds in
// flight.
func printRoundEvent(e *env, run string, ev iterate.Event, tries int, p *rowPlotter) {
	name := fmt.Sprintf("round %d", ev.Round)
	if ev.Round == 0 {
		name = iterate.IterationName(0)
	}
	switch {
	case ev.Err != nil && ev.Retry:
		fmt.Fprintf(e.stderr, "%s: %s failed (%v); running it again from its checkpoint (at most %d tries)\n", name, ev.Step, ev.Err, tries)
	case ev.Err != nil:
	case ev.Finished:
		fmt.Fprintf(e.stderr, "%s: %s done (%d rounds playing)\n", name, ev.Step, ev.InFlight)
		p.ranNow[ev.Round] = true
	case ev.Step == iterate.StepRollout:
		fmt.Fprintf(e.stderr, "%s: rollout with %s (%d rounds playing)…\n", name, adapterLabel(run, ev.Adapter), ev.InFlight)
	default:
		fmt.Fprintf(e.stderr, "%s: %s %s…\n", name, ev.Step, adapterLabel(run, ev.Adapter))
	}
}

func adapterLabel(run string, a iterate.Adapter) string {
	if a.Version < 0 {
		return "the base model"
	}
	return iterate.AdapterName(run, a.Version)
}

// iterateOutcome turns the loop's error into the command's: done, stopped
// by Ctrl-C (resumable), a step that failed, or a refused state.
func iterateOutcome(ctx context.Context, e *env, o *iterateOptions, err error, done string) error {
	var step *iterate.StepError
	switch {
	case err == nil:
		fmt.Fprintln(e.stdout, done)
		return nil
	case ctx.Err() != nil:
		where := "before the first step"
		if errors.As(err, &step) {
			where = fmt.Sprintf("in iteration %d, step %s", step.Iteration, step.Step)
		}
		if o.maxStaleness > 0 || o.roundSize > 0 {
			where = "with rounds in flight"
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

// checkTeacher checks the warm-up's flags.
func (o *iterateOptions) checkTeacher() error {
	switch {
	case o.teacher == "" && (len(o.teacherURLs) > 0 || o.nats.cmd.Flags().Changed("teacher-tries")):
		return usagef("--teacher-url and --teacher-tries configure the warm-up: give --teacher MODEL (or heuristic)")
	case o.teacher == "":
		return nil
	case o.initAdapter != "":
		return usagef("--teacher trains adapter 0 and --init-adapter gives it: pass one of them")
	case o.teacher == iterate.TeacherHeuristic && len(o.teacherURLs) > 0:
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

// dashboard is the loop's TensorBoard view with --report-to tensorboard
// (nil: none); a dashboard that cannot be written is said once, and the
// loop goes on (report.jsonl has the figures).
func (o *iterateOptions) dashboard() (*iterate.Dashboard, error) {
	switch o.reportTo {
	case "none":
		return nil, nil
	case "tensorboard":
		dir := o.loggingDir
		if dir == "" {
			dir = filepath.Join(o.out, "logs")
		}
		abs, err := filepath.Abs(dir)
		return &iterate.Dashboard{Dir: abs}, err
	}
	return nil, usagef("--report-to %q: want tensorboard or none (iterate writes TensorBoard's files; wandb sync --sync-tensorboard takes them to wandb)", o.reportTo)
}

// printIterationRow prints an iteration's report row as one line.
func printIterationRow(e *env, r iterate.Row) {
	var b strings.Builder
	if r.Acting != nil {
		fmt.Fprintf(&b, "round %d:", r.Iteration)
	} else {
		fmt.Fprintf(&b, "%s:", iterate.IterationName(r.Iteration))
	}
	if ro := r.Rollout; ro != nil && ro.Tries > 0 {
		fmt.Fprintf(&b, " teacher %s solved %d of %d instances in %d tries, %d SFT rows;", ro.Model, ro.Solved, ro.Instances, ro.Tries, ro.Rows)
	} else if ro != nil {
		fmt.Fprintf(&b, " rollout with %s: %d trajectories, %d rows, advantage %.3f±%.3f, weight %.2f, dc gap %.3f;",
			ro.Model, ro.Trajectories, ro.Rows, ro.AdvantageMean, ro.AdvantageStd, ro.WeightMean, ro.DCGapFile)
	}
	if t := r.Train; t != nil {
		switch {
		case t.Skipped != "":
			fmt.Fprintf(&b, " train skipped (%s);", t.Skipped)
		case r.Staleness != nil:
			fmt.Fprintf(&b, " train %d steps at staleness %d, loss %.4f → %.4f, %.2f s/step;", t.Steps, *r.Staleness, t.LossFirst, t.LossLast, t.SecondsPerStep)
		default:
			fmt.Fprintf(&b, " train %d steps, loss %.4f → %.4f, %.2f s/step;", t.Steps, t.LossFirst, t.LossLast, t.SecondsPerStep)
		}
	}
	if ev := r.Eval; ev != nil {
		fmt.Fprintf(&b, " eval F1 file %.3f module %.3f function %.3f (%d instances)", ev.F1["file"], ev.F1["module"], ev.F1["function"], ev.Instances)
	}
	fmt.Fprintln(e.stdout, strings.TrimSuffix(b.String(), ";"))
}

// localizer plays instances in the driver's process with this process's
// policies, index options and limits: the loop's Player (the warm-up and
// the evaluation).
type localizer struct {
	e           *env
	policies    *policy.Registry
	index       repoindex.BuildOptions
	concurrency int
	outage      time.Duration
}

func (l *localizer) Play(ctx context.Context, p iterate.Play) ([]schema.Trajectory, error) {
	repos := gitrepo.NewSet(p.Repos)
	defer repos.Close()
	_, statErr := os.Stat(p.Out) // an interrupted play left its trajectories there: continue it
	progress, finish := l.e.progress(p.Label)
	defer finish()
	res, err := worker.Localize(ctx, worker.LocalizeConfig{Instances: p.Instances, Repos: repos, Spec: p.Spec, Policies: l.policies,
		Index: l.index, Samples: p.Samples, FirstSample: p.FirstSample, Concurrency: l.concurrency, RunID: p.RunID, Out: p.Out,
		Resume: statErr == nil, Progress: progress, Log: l.e.log, OutageBudget: l.outage, Grace: worker.DefaultLocalizeGrace, Abort: l.e.abort})
	return res.Trajectories, err
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

package iterate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/schema"
)

// Player plays instances in the driver's own process — the warm-up's
// teacher and the evaluation's greedy adapter — and returns every
// trajectory of the play, those an interrupted earlier play left in Out
// included. The command hands in the worker's Localize; the coordinator
// never imports the worker.
type Player interface {
	Play(ctx context.Context, p Play) ([]schema.Trajectory, error)
}

// Play is one call of a Player.
type Play struct {
	// Label names the play in progress lines ("teacher try 2", "evaluation").
	Label string
	// Out receives the play's trajectories; a play finds there what an
	// interrupted one finished, and plays only the rest.
	Out string
	// Repos is the folder of the instances' repositories.
	Repos     string
	Instances []schema.Instance
	Spec      schema.RunSpec
	Samples   int
	// FirstSample numbers the samples, so that playing an instance again
	// plays new jobs (other ids, other seeds).
	FirstSample int64
	RunID       string
}

// FarmConfig is what the loop's steps need of the run, the farm, the
// replicas and the trainer.
type FarmConfig struct {
	// Run names the run; adapter j is served as AdapterName(Run, j).
	Run string
	// Out is the driver's folder: adapters/, eval/, warmup/.
	Out string
	// Spec is the run's: its policy (the base model, served by the
	// replicas), sampling and limits.
	Spec schema.RunSpec
	// Gold is the training set's rows and gold.
	Gold *coordinator.GoldReport
	// Dataset and Repos are the training set's file and repositories.
	Dataset, Repos string
	// Samples are the rollouts per instance and iteration.
	Samples int
	// RoundSize, when set, plays the training set in rounds of that many
	// instances (asynchronous iterations): iteration k is a round, and plays
	// slice (k−1) mod RoundsPerPass of the training set.
	RoundSize int
	Replicas  []Replica

	// Bus is the farm the iterations are published to; Shards is the tree
	// its learner writes (<run>/<iteration>/<group>/).
	Bus    *bus.Bus
	Shards string
	// ShardTimeout bounds the wait for the learner to shard an iteration
	// once every job has a trajectory (0: DefaultShardTimeout).
	ShardTimeout time.Duration
	// FarmFailed, when not nil, receives the error of an embedded farm's
	// worker or learner that stopped: no one is left to finish a rollout.
	FarmFailed <-chan error
	// Learn is the learner's configuration (the warm-up's SFT shards).
	Learn learner.Config

	Trainer TrainerConfig
	// Teacher plays the warm-up (iteration 0); its Model empty: none.
	Teacher Teacher
	// Eval is the held-out evaluation; its Gold nil: none.
	Eval Evaluation

	// Player plays the warm-up and the evaluation in this process.
	Player Player
	// Languages give function-level predictions their canonical ids.
	Languages *lang.Set
	// Progress, when set, gives a progress line for label: report it with
	// done of total, finish it when the work is over.
	Progress func(label string) (report func(done, total int), finish func())
	// Messages receives the loop's lines for the person running it, and the
	// trainer's output.
	Messages io.Writer
	Log      zerolog.Logger
	// CodeVersion is recorded in the warm-up shards' source.
	CodeVersion string
}

// TrainerConfig says how adapters are trained.
type TrainerConfig struct {
	// Command is the trainer command template (DefaultTrainer's form).
	Command string
	// Model is the base model the trainer loads.
	Model string
	// Grace is how long an interrupted trainer may take to save its
	// checkpoint before it is killed.
	Grace time.Duration
	// Logs, when set, is the dashboard's folder, handed on as {report}.
	Logs string
}

// TeacherHeuristic names the built-in heuristic policy as a teacher.
const TeacherHeuristic = "heuristic"

// Teacher is the warm-up's: the model that plays the training set (or
// TeacherHeuristic) and how many times an unsolved instance is played.
type Teacher struct {
	Model string
	Tries int
}

// Evaluation is the held-out set each adapter plays greedily.
type Evaluation struct {
	// Gold gives the held-out rows and gold; it is called once, at the
	// first evaluation (nil: no evaluation).
	Gold    func(ctx context.Context) (*coordinator.GoldReport, error)
	Repos   string
	Samples int
}

// Farm does the loop's steps against a farm: it is the Steps a run of
// a2farm iterate drives.
type Farm struct {
	cfg      FarmConfig
	evalGold *coordinator.GoldReport // extracted at the first evaluation: the same for every iteration
}

// NewFarm returns the steps of cfg's run.
func NewFarm(cfg FarmConfig) (*Farm, error) {
	switch {
	case cfg.Run == "" || cfg.Out == "":
		return nil, errors.New("iterate: a run id and a folder are required")
	case cfg.Gold == nil:
		return nil, errors.New("iterate: the training set's gold is required")
	case cfg.Bus == nil || cfg.Shards == "":
		return nil, errors.New("iterate: a farm (bus and shards tree) is required")
	case cfg.Player == nil:
		return nil, errors.New("iterate: a player is required (warm-up and evaluation)")
	case cfg.Samples < 1:
		return nil, fmt.Errorf("iterate: samples %d: want 1 or more", cfg.Samples)
	}
	if cfg.Messages == nil {
		cfg.Messages = io.Discard
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) (func(int, int), func()) { return func(int, int) {}, func() {} }
	}
	if cfg.ShardTimeout <= 0 {
		cfg.ShardTimeout = DefaultShardTimeout
	}
	if cfg.Eval.Samples < 1 {
		cfg.Eval.Samples = 1
	}
	return &Farm{cfg: cfg}, nil
}

// DefaultShardTimeout is how long a rollout waits, once every job has a
// trajectory, for the learner to shard its groups.
const DefaultShardTimeout = 10 * time.Minute

// IterationName is how messages name iteration k.
func IterationName(k int) string {
	if k == 0 {
		return "iteration 0 (warm-up)"
	}
	return fmt.Sprintf("iteration %d", k)
}

// AdapterDir is where iteration k's finished adapter is in the driver's
// folder dir: the trainer writes it aside (AdapterDir + ".partial") and the
// training step renames it here once the trainer has exited 0, so a folder
// here is always whole.
func AdapterDir(dir string, k int) string {
	return filepath.Join(dir, "adapters", fmt.Sprintf("it%d", k))
}

// policyOf is the run spec's policy with adapter a (or the base model).
func (f *Farm) policyOf(a Adapter) schema.Policy {
	p := f.cfg.Spec.Policy
	if a.Version >= 0 {
		p.Model, p.Adapter, p.Version = AdapterName(f.cfg.Run, a.Version), a.Path, fmt.Sprintf("it%d", a.Version)
	} else {
		p.Version = "base"
	}
	return p
}

// Serve loads adapter a on every replica and confirms it there, then
// unloads the run's older versions: in the synchronous loop iteration k's
// rollouts, and adapter k−1's evaluation, are finished before iteration
// k+1 is served, so only a acts from here on.
func (f *Farm) Serve(ctx context.Context, k int, a Adapter, older []Adapter) error {
	if a.Version < 0 {
		for _, r := range f.cfg.Replicas {
			if err := Confirm(ctx, r, f.cfg.Spec.Policy.Model, ""); err != nil {
				return fmt.Errorf("replica %s: %w", r.Name, err)
			}
		}
		return nil
	}
	if err := Deploy(ctx, f.cfg.Replicas, AdapterName(f.cfg.Run, a.Version), a.Path); err != nil {
		return err
	}
	names := make([]string, len(older))
	for i, o := range older {
		names[i] = AdapterName(f.cfg.Run, o.Version)
	}
	return Retire(ctx, f.cfg.Replicas, names)
}

// Rollout publishes iteration k played by a, waits until every job has a
// trajectory and the learner has sharded every group, and sums the
// shards' manifests. Iteration 0 is the teacher's warm-up.
func (f *Farm) Rollout(ctx context.Context, k int, a Adapter) (RolloutResult, error) {
	if k == 0 {
		return f.warmup(ctx)
	}
	ctx, stop := f.whileTheFarmRuns(ctx)
	r, err := f.rollout(ctx, k, a)
	return r, stop(err)
}

// whileTheFarmRuns gives a context that ends when a role of the embedded
// farm stops with an error (no worker or learner is left to finish the
// rollout), and a function that turns the step's error into that one.
func (f *Farm) whileTheFarmRuns(ctx context.Context) (context.Context, func(error) error) {
	if f.cfg.FarmFailed == nil {
		return ctx, func(err error) error { return err }
	}
	roleCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case err := <-f.cfg.FarmFailed:
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

func (f *Farm) rollout(ctx context.Context, k int, a Adapter) (RolloutResult, error) {
	spec := f.cfg.Spec
	spec.Policy = f.policyOf(a)
	progress, finish := f.cfg.Progress("published")
	instances := f.instancesOf(k)
	pub, err := coordinator.Publish(ctx, coordinator.RunConfig{Bus: f.cfg.Bus, RunID: f.cfg.Run, Iteration: int64(k),
		Instances: instances, Gold: f.cfg.Gold.Locations(), Samples: f.cfg.Samples, Spec: spec, Progress: progress})
	finish()
	if err != nil {
		return RolloutResult{}, err
	}
	if !pub.Complete {
		if err := f.waitAnswered(ctx, pub.Manifest, instances); err != nil {
			return RolloutResult{}, err
		}
	}
	if err := f.waitSharded(ctx, k); err != nil {
		return RolloutResult{}, err
	}
	r, err := ShardStats(filepath.Join(f.cfg.Shards, f.cfg.Run, fmt.Sprint(k)))
	r.Model, r.Jobs = spec.Policy.Model, pub.Manifest.Expected
	return r, err
}

// waitAnswered follows the iteration until every job has a trajectory. Jobs
// that exhaust their deliveries are dead-lettered meanwhile (with a learner
// running, each advisory goes to one of them).
func (f *Farm) waitAnswered(ctx context.Context, m *schema.RunManifest, instances []schema.Instance) error {
	defer f.cfg.Bus.StartDeadJobHandler(ctx, f.cfg.Log)()
	progress, finish := f.cfg.Progress("trajectories")
	defer finish()
	return coordinator.Wait(ctx, f.cfg.Bus, m, coordinator.WaitOptions{Instances: instances, Progress: progress,
		Rejected: func(seq uint64, why string) {
			f.cfg.Log.Warn().Uint64("seq", seq).Str("reason", why).Msg("a message in the run's trajectory log counts nowhere")
		},
		OnError: func(err error) {
			f.cfg.Log.Warn().Err(err).Msg("lost the NATS server; waiting for it (the run goes on)")
		}})
}

// RoundsPerPass is how many rounds of size play a training set of n
// instances once.
func RoundsPerPass(n, size int) int {
	if size <= 0 || size >= n {
		return 1
	}
	return (n + size - 1) / size
}

// instancesOf is what iteration (or round) k plays: the whole training
// set, or round k's slice of it.
func (f *Farm) instancesOf(k int) []schema.Instance {
	all := f.cfg.Gold.Instances
	if f.cfg.RoundSize <= 0 || f.cfg.RoundSize >= len(all) {
		return all
	}
	slice := (k - 1) % RoundsPerPass(len(all), f.cfg.RoundSize)
	return all[slice*f.cfg.RoundSize : min((slice+1)*f.cfg.RoundSize, len(all))]
}

// waitSharded waits until the learner reports every group of iteration k
// sharded.
func (f *Farm) waitSharded(ctx context.Context, k int) error {
	deadline := time.Now().Add(f.cfg.ShardTimeout)
	said := false
	for {
		st, err := coordinator.Status(ctx, f.cfg.Bus, f.cfg.Run, time.Now())
		if err == nil {
			for _, r := range st.Runs {
				if r.Iteration == int64(k) && r.Groups > 0 && r.Sharded >= r.Groups {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the learner has not sharded iteration %d within --shard-timeout %s (is a learner running? a2farm status --run %s)", k, f.cfg.ShardTimeout, f.cfg.Run)
		}
		if !said {
			fmt.Fprintf(f.cfg.Messages, "iteration %d: every job answered; waiting for the learner to shard its groups\n", k)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Train trains adapter k from init on iteration k's shards; iteration 0
// trains adapter 0 on the warm-up's SFT shards.
func (f *Farm) Train(ctx context.Context, k int, init Adapter, rollout RolloutResult) (TrainResult, error) {
	if k == 0 {
		return f.trainWarmup(ctx, rollout)
	}
	if rollout.Rows == 0 {
		return TrainResult{Adapter: init.Path, Skipped: fmt.Sprintf("iteration %d wrote no training row (no turn carries a weight): adapter %d is adapter %d", k, k, k-1)}, nil
	}
	return f.train(ctx, k, TrainerVars{Model: f.cfg.Trainer.Model, Init: init.Path, Shards: f.cfg.Shards, Run: f.cfg.Run, Iteration: k})
}

// train runs the trainer into AdapterDir(k) + ".partial" and renames that
// into AdapterDir(k) once the trainer has exited 0 with an adapter there.
func (f *Farm) train(ctx context.Context, k int, v TrainerVars) (TrainResult, error) {
	v.Logs = f.cfg.Trainer.Logs
	return Train(ctx, AdapterDir(f.cfg.Out, k), f.cfg.Trainer.Command, v, f.cfg.Trainer.Grace, func(line string) {
		fmt.Fprintf(f.cfg.Messages, "%s: %s\n", IterationName(k), line)
	}, f.cfg.Messages)
}

// Evaluate plays the held-out set greedily with a (one branchless episode
// per sample) in this process and scores it at three levels.
func (f *Farm) Evaluate(ctx context.Context, k int, a Adapter) (EvalResult, bool, error) {
	if f.cfg.Eval.Gold == nil {
		return EvalResult{}, false, nil
	}
	if a.Version >= 0 {
		if err := Deploy(ctx, f.cfg.Replicas, AdapterName(f.cfg.Run, a.Version), a.Path); err != nil {
			return EvalResult{}, false, err
		}
	}
	spec := f.cfg.Spec
	spec.Policy = f.policyOf(a)
	spec.Sampling.Temperature, spec.Sampling.TopP = 0, 0
	spec.Branching = schema.Branching{}
	if f.evalGold == nil {
		g, err := f.cfg.Eval.Gold(ctx)
		if err != nil {
			return EvalResult{}, false, err
		}
		f.evalGold = g
	}
	played, err := f.cfg.Player.Play(ctx, Play{Label: "evaluation", Out: filepath.Join(f.cfg.Out, "eval", fmt.Sprintf("it%d", k)),
		Repos: f.cfg.Eval.Repos, Instances: f.evalGold.Instances, Spec: spec, Samples: f.cfg.Eval.Samples})
	if err != nil {
		return EvalResult{}, false, err
	}
	r, err := score(played, f.evalGold.Golds(), f.cfg.Languages)
	return r, err == nil, err
}

// score is an evaluation's figures: F1, precision@k and recall@k at the
// file, module and function levels, and the file-level discovery–commit gap.
func score(played []schema.Trajectory, golds []schema.Gold, languages *lang.Set) (EvalResult, error) {
	preds := make([]schema.LocOutput, len(played))
	for i, tr := range played {
		preds[i] = tr.LocOutput()
	}
	rep, err := metrics.Evaluate(preds, golds, metrics.EvalOptions{Languages: languages})
	if err != nil {
		return EvalResult{}, err
	}
	stats := metrics.TrajectoryStats(played, golds, languages)
	r := EvalResult{Instances: rep.Instances, F1: map[string]float64{}, Precision: map[string]float64{},
		Recall: map[string]float64{}, DCGapFile: stats["file.dc_gap"]}
	for _, level := range []string{"file", "module", "function"} {
		r.F1[level] = rep.Overall[level+".f1"]
		r.Precision[level] = rep.Overall[level+".precision@k"]
		r.Recall[level] = rep.Overall[level+".recall@k"]
	}
	return r, nil
}

package iterate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
)

// teacherSpec is what plays the warm-up: the teacher, with the run's
// sampling and limits, one independent sample per try (no branches). It
// asks for no token ids: the teacher's tokenizer need not be the student's,
// so its SFT shards hold messages, which the trainer renders with the
// student's own chat template.
func (f *Farm) teacherSpec() schema.RunSpec {
	spec := f.cfg.Spec
	spec.Branching = schema.Branching{}
	spec.Policy = schema.Policy{Kind: schema.PolicyOpenAI, Model: f.cfg.Teacher.Model, Version: "teacher", TextMode: f.cfg.Spec.Policy.TextMode}
	if f.cfg.Teacher.Model == TeacherHeuristic {
		spec.Policy = schema.Policy{Kind: schema.PolicyHeuristic, Version: "teacher"}
	}
	return spec
}

// WarmupShards is the folder of the warm-up's SFT shards in the driver's
// folder dir; beside it, try<t>/ holds the teacher's try t as a play
// writes it.
func WarmupShards(dir string) string { return filepath.Join(dir, "warmup", "shards") }

// warmup is iteration 0's rollout, as the reference's stage 1: the teacher
// plays every training instance once; the instances none of whose
// trajectories matches the gold (leniently) at every level are played
// again, up to Teacher.Tries times in all (not those whose gold is empty
// at a level: no answer can match it there); then each solved instance's
// best trajectory becomes SFT rows of weight 1 (what replay --sft writes).
// Try t plays sample t−1, so every try is a new job with its own seed. A
// resumed warm-up finds the tries it finished on disk and plays only what
// is missing.
func (f *Farm) warmup(ctx context.Context) (RolloutResult, error) {
	if f.cfg.Teacher.Model == "" || f.cfg.Teacher.Tries < 1 {
		return RolloutResult{}, fmt.Errorf("the warm-up needs a teacher and 1 or more tries (teacher %q, %d tries)", f.cfg.Teacher.Model, f.cfg.Teacher.Tries)
	}
	spec := f.teacherSpec()
	gold := f.cfg.Gold.Locations()
	all := f.cfg.Gold.Instances
	remaining := all
	var (
		played []schema.Trajectory
		res    *learner.Result
		tries  int
	)
	for try := 1; try <= f.cfg.Teacher.Tries && len(remaining) > 0; try++ {
		trs, err := f.cfg.Player.Play(ctx, Play{Label: fmt.Sprintf("teacher try %d", try),
			Out: filepath.Join(filepath.Dir(WarmupShards(f.cfg.Out)), fmt.Sprintf("try%d", try)), Repos: f.cfg.Repos,
			Instances: remaining, Spec: spec, Samples: 1, FirstSample: int64(try - 1), RunID: f.cfg.Run})
		if err != nil {
			return RolloutResult{}, fmt.Errorf("teacher try %d: %w", try, err)
		}
		played, tries = append(played, trs...), try
		if res, err = learner.Process(played, gold, f.cfg.Learn); err != nil {
			return RolloutResult{}, err
		}
		solved := map[string]bool{}
		for _, lt := range learner.SFTRows(res) {
			solved[lt.Trajectory.InstanceID] = true
		}
		var next []schema.Instance
		hopeless := 0
		for _, in := range remaining {
			switch {
			case solved[in.InstanceID]:
			case !everyLevel(gold[in.InstanceID]):
				hopeless++ // no answer can match an empty gold level: playing it again cannot help
			default:
				next = append(next, in)
			}
		}
		remaining = next
		fmt.Fprintf(f.cfg.Messages, "warm-up: after try %d, %d of %d instances have a teacher trajectory matching the gold at every level",
			try, len(solved), len(all))
		if hopeless > 0 && try == 1 {
			fmt.Fprintf(f.cfg.Messages, "; instances with no gold at some level (no module or function edited) cannot, and are not played again: %d", hopeless)
		}
		fmt.Fprintln(f.cfg.Messages)
	}
	// The shards are rewritten from the tries on every run of this step:
	// they are a function of the tries, and a folder half written by an
	// interrupted run must not be read.
	shards := WarmupShards(f.cfg.Out)
	if err := os.RemoveAll(shards); err != nil {
		return RolloutResult{}, err
	}
	m, kept, err := learner.WriteShards(res, f.cfg.Learn, learner.ShardConfig{Dir: shards, SFT: true,
		Source: map[string]any{"run": f.cfg.Run, "iteration": 0, "teacher": f.cfg.Teacher.Model, "tries": tries, "dataset": f.cfg.Dataset, "code_version": f.cfg.CodeVersion}})
	if err != nil {
		return RolloutResult{}, err
	}
	d := res.Diagnostics
	return RolloutResult{Model: f.cfg.Teacher.Model, Jobs: len(played), Groups: kept, Trajectories: d.Trajectories, Rows: m.Rows,
		Steps: d.Steps, DCGapFile: d.DCGapFile, WeightMean: 1, Tries: tries, Instances: len(all), Solved: kept}, nil
}

// everyLevel: the gold names a file, a module and an entity.
func everyLevel(l schema.Locations) bool {
	return len(l.Files) > 0 && len(l.Modules) > 0 && len(l.Entities) > 0
}

// trainWarmup trains adapter 0 on the warm-up's SFT shards, from the base
// model. With no solved instance there is nothing to train: iteration 1
// then starts from the base model, and the row says so.
func (f *Farm) trainWarmup(ctx context.Context, rollout RolloutResult) (TrainResult, error) {
	if rollout.Rows == 0 {
		return TrainResult{Skipped: fmt.Sprintf("no teacher trajectory matched the gold at every level in %d tries: iteration 1 starts from the base model", f.cfg.Teacher.Tries)}, nil
	}
	return f.train(ctx, 0, TrainerVars{Model: f.cfg.Trainer.Model, Shards: WarmupShards(f.cfg.Out), Run: f.cfg.Run, SFT: true})
}

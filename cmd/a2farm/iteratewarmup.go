package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
)

// TeacherHeuristic names the built-in heuristic policy as --teacher.
const TeacherHeuristic = "heuristic"

// teacherSpec is what plays the warm-up: the teacher, with the run's
// sampling and limits, one independent sample per try (no branches). It
// asks for no token ids: the teacher's tokenizer need not be the student's,
// so its SFT shards hold messages, which the trainer renders with the
// student's own chat template.
func (s *iterateSteps) teacherSpec() schema.RunSpec {
	spec := s.spec
	spec.Branching = schema.Branching{}
	spec.Policy = schema.Policy{Kind: schema.PolicyOpenAI, Model: s.o.teacher, Version: "teacher", TextMode: s.spec.Policy.TextMode}
	if s.o.teacher == TeacherHeuristic {
		spec.Policy = schema.Policy{Kind: schema.PolicyHeuristic, Version: "teacher"}
	}
	return spec
}

// warmupDir holds the teacher's tries (try<t>/, as localize writes them)
// and the SFT shards made of them (shards/).
func (s *iterateSteps) warmupDir() string { return filepath.Join(s.o.out, "warmup") }

// warmup is iteration 0's rollout, as the reference's stage 1: the teacher
// plays every training instance once; the instances none of whose
// trajectories matches the gold (leniently) at every level are played
// again, up to --teacher-tries times in all (not those whose gold is empty
// at a level: no answer can match it there); then each solved instance's
// best trajectory becomes SFT rows of weight 1 (what replay --sft writes).
// Try t plays sample t−1, so every try is a new job with its own seed. A
// resumed warm-up finds the tries it finished on disk and plays only what
// is missing.
func (s *iterateSteps) warmup(ctx context.Context) (iterate.RolloutResult, error) {
	spec := s.teacherSpec()
	gold := s.gold.Locations()
	remaining := s.gold.Instances
	var (
		played []schema.Trajectory
		res    *learner.Result
		tries  int
	)
	for try := 1; try <= s.o.teacherTries && len(remaining) > 0; try++ {
		lr, err := s.localize(ctx, fmt.Sprintf("teacher try %d", try), filepath.Join(s.warmupDir(), fmt.Sprintf("try%d", try)), s.o.reposDir,
			worker.LocalizeConfig{Instances: remaining, Spec: spec, Samples: 1, FirstSample: int64(try - 1), RunID: s.o.runID})
		if err != nil {
			return iterate.RolloutResult{}, fmt.Errorf("teacher try %d: %w", try, err)
		}
		played, tries = append(played, lr.Trajectories...), try
		if res, err = learner.Process(played, gold, s.learn); err != nil {
			return iterate.RolloutResult{}, err
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
		fmt.Fprintf(s.e.stderr, "warm-up: after try %d, %d of %d instances have a teacher trajectory matching the gold at every level",
			try, len(solved), len(s.gold.Instances))
		if hopeless > 0 && try == 1 {
			fmt.Fprintf(s.e.stderr, "; instances with no gold at some level (no module or function edited) cannot, and are not played again: %d", hopeless)
		}
		fmt.Fprintln(s.e.stderr)
	}
	// The shards are rewritten from the tries on every run of this step:
	// they are a function of the tries, and a folder half written by an
	// interrupted run must not be read.
	shards := filepath.Join(s.warmupDir(), "shards")
	if err := os.RemoveAll(shards); err != nil {
		return iterate.RolloutResult{}, err
	}
	m, kept, err := learner.WriteShards(res, s.learn, learner.ShardConfig{Dir: shards, SFT: true,
		Source: map[string]any{"run": s.o.runID, "iteration": 0, "teacher": s.o.teacher, "tries": tries, "dataset": s.o.datasetPath, "code_version": version()}})
	if err != nil {
		return iterate.RolloutResult{}, err
	}
	d := res.Diagnostics
	return iterate.RolloutResult{Model: s.o.teacher, Jobs: len(played), Groups: kept, Trajectories: d.Trajectories, Rows: m.Rows,
		Steps: d.Steps, DCGapFile: d.DCGapFile, WeightMean: 1, Tries: tries, Instances: len(s.gold.Instances), Solved: kept}, nil
}

// everyLevel: the gold names a file, a module and an entity.
func everyLevel(l schema.Locations) bool {
	return len(l.Files) > 0 && len(l.Modules) > 0 && len(l.Entities) > 0
}

// trainWarmup trains adapter 0 on the warm-up's SFT shards, from the base
// model. With no solved instance there is nothing to train: iteration 1
// then starts from the base model, and the row says so.
func (s *iterateSteps) trainWarmup(ctx context.Context, rollout iterate.RolloutResult) (iterate.TrainResult, error) {
	shards := filepath.Join(s.warmupDir(), "shards")
	if rollout.Rows == 0 {
		return iterate.TrainResult{Skipped: fmt.Sprintf("no teacher trajectory matched the gold at every level in %d tries: iteration 1 starts from the base model", s.o.teacherTries)}, nil
	}
	return s.runTrainer(ctx, 0, iterate.TrainerVars{Model: s.o.trainModel, Shards: shards, Run: s.o.runID, SFT: true})
}

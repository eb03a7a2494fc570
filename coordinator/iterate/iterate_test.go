package iterate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingSteps records the steps it runs and fails the one named in
// failAt once.
type recordingSteps struct {
	ran       []string
	failAt    string
	cancel    func() // called instead of failing, when set: a Ctrl-C in that step
	skipTrain map[int]bool
	adapters  map[string]Adapter // the adapter each step was handed, by "k/step"
	older     map[int][]Adapter  // the earlier versions each serve was handed
}

func (r *recordingSteps) do(ctx context.Context, k int, step Step) error {
	name := fmt.Sprintf("%d/%s", k, step)
	if name == r.failAt {
		r.failAt = ""
		if r.cancel != nil {
			r.cancel()
			return ctx.Err()
		}
		return errors.New("boom")
	}
	r.ran = append(r.ran, name)
	return nil
}

func (r *recordingSteps) Serve(ctx context.Context, k int, a Adapter, older []Adapter) error {
	r.saw(k, StepServe, a)
	if r.older == nil {
		r.older = map[int][]Adapter{}
	}
	r.older[k] = older
	return r.do(ctx, k, StepServe)
}
func (r *recordingSteps) Rollout(ctx context.Context, k int, a Adapter) (RolloutResult, error) {
	r.saw(k, StepRollout, a)
	return RolloutResult{Jobs: k, Rows: 10 * k}, r.do(ctx, k, StepRollout)
}

// Train checks it is handed its iteration's rollout, which a resumed run
// reads back from the state. An iteration in skipTrain trains nothing: its
// adapter is the one before.
func (r *recordingSteps) Train(ctx context.Context, k int, init Adapter, rollout RolloutResult) (TrainResult, error) {
	r.saw(k, StepTrain, init)
	if rollout.Jobs != k {
		return TrainResult{}, fmt.Errorf("iteration %d trains on the rollout of %d", k, rollout.Jobs)
	}
	if r.skipTrain[k] {
		return TrainResult{Adapter: init.Path, Skipped: "no row"}, r.do(ctx, k, StepTrain)
	}
	return TrainResult{Steps: k, Adapter: fmt.Sprintf("adapters/it%d", k)}, r.do(ctx, k, StepTrain)
}
func (r *recordingSteps) Evaluate(ctx context.Context, k int, a Adapter) (EvalResult, bool, error) {
	r.saw(k, StepEvaluate, a)
	return EvalResult{Instances: k}, true, r.do(ctx, k, StepEvaluate)
}

// saw records the adapter a step was handed.
func (r *recordingSteps) saw(k int, step Step, a Adapter) {
	if r.adapters == nil {
		r.adapters = map[string]Adapter{}
	}
	r.adapters[fmt.Sprintf("%d/%s", k, step)] = a
}

// TestTheDriverNamesEachStepsAdapterFromItsState: the adapter after an
// iteration is the one its training recorded (an iteration that trained
// nothing keeps the one before), through a resume, whatever lies on disk.
func TestTheDriverNamesEachStepsAdapterFromItsState(t *testing.T) {
	dir := t.TempDir()
	init := Adapter{Version: 0, Path: "sft"}
	steps := &recordingSteps{failAt: "3/serve", skipTrain: map[int]bool{2: true}}
	cfg := Config{Dir: dir, Iterations: 3, Initial: init, Plan: 1, Steps: steps}
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("no error from the failing step")
	}
	cfg.Resume = true
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	it1 := Adapter{Version: 1, Path: "adapters/it1"}
	want := map[string]Adapter{
		"1/serve": init, "1/rollout": init, "1/train": init, "1/evaluate": it1,
		"2/serve": it1, "2/rollout": it1, "2/train": it1, "2/evaluate": it1, // iteration 2 trained nothing
		"3/serve": it1, "3/rollout": it1, "3/train": it1, "3/evaluate": {Version: 3, Path: "adapters/it3"},
	}
	for step, a := range want {
		if got := steps.adapters[step]; got != a {
			t.Errorf("%s was handed %+v, want %+v", step, got, a)
		}
	}
	// Each serve is handed the earlier versions to retire: none before
	// adapter 0, adapter 0 before adapter 1 (also when iteration 2 trained
	// nothing and adapter 1 is served again).
	for k, want := range map[int][]Adapter{1: nil, 2: {init}, 3: {init}} {
		if got := steps.older[k]; !slices.Equal(got, want) {
			t.Errorf("serve %d was handed %+v to retire, want %+v", k, got, want)
		}
	}
	base := &recordingSteps{}
	if _, err := Run(context.Background(), Config{Dir: t.TempDir(), Iterations: 1, Plan: 1, Steps: base, Initial: Base}); err != nil {
		t.Fatal(err)
	}
	if got := base.adapters["1/serve"]; got != Base {
		t.Errorf("first serve with no initial adapter: %+v, want the base model", got)
	}
}

// TestRunResumesAtTheStepThatFailed: a run stopped by a failing step or a
// Ctrl-C, resumed, runs every step exactly once in order; the warm-up
// (iteration 0) only rolls out and trains.
func TestRunResumesAtTheStepThatFailed(t *testing.T) {
	all := []string{"0/rollout", "0/train", "1/serve", "1/rollout", "1/train", "1/evaluate", "2/serve", "2/rollout", "2/train", "2/evaluate"}
	for _, tc := range []struct {
		failAt string
		ctrlC  bool
	}{
		{failAt: "0/rollout"}, {failAt: "0/train"}, {failAt: "1/serve"}, {failAt: "1/rollout", ctrlC: true},
		{failAt: "2/train"}, {failAt: "2/evaluate", ctrlC: true},
	} {
		t.Run(fmt.Sprintf("%s ctrl-c=%v", tc.failAt, tc.ctrlC), func(t *testing.T) {
			dir := t.TempDir()
			steps := &recordingSteps{failAt: tc.failAt}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.ctrlC {
				steps.cancel = cancel
			}
			cfg := Config{Dir: dir, Iterations: 2, Warmup: true, Plan: map[string]int{"samples": 8}, Steps: steps}
			_, err := Run(ctx, cfg)
			var se *StepError
			if !errors.As(err, &se) || fmt.Sprintf("%d/%s", se.Iteration, se.Step) != tc.failAt {
				t.Fatalf("error %v, want a StepError naming %s", err, tc.failAt)
			}
			if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrStateExists) {
				t.Fatalf("again without Resume: %v, want ErrStateExists", err)
			}
			cfg.Resume = true
			rows, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(steps.ran, " "); got != strings.Join(all, " ") {
				t.Errorf("ran %s\nwant %s", got, strings.Join(all, " "))
			}
			if len(rows) != 3 || rows[0].Eval != nil || rows[2].Rollout.Jobs != 2 || rows[2].Eval.Instances != 2 {
				t.Errorf("rows %+v", rows)
			}
			st, err := Load(dir)
			if err != nil || len(st.Done) != len(all) {
				t.Errorf("state %+v, %v: want %d finished steps", st, err, len(all))
			}
		})
	}
}

// TestRunRefusesAResumeWithAnotherPlan: the plan is compared as JSON
// values, so only a different value is refused.
func TestRunRefusesAResumeWithAnotherPlan(t *testing.T) {
	dir := t.TempDir()
	steps := &recordingSteps{failAt: "1/train"}
	cfg := Config{Dir: dir, Iterations: 1, Plan: map[string]any{"samples": 8, "run": "r"}, Steps: steps}
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("the failing step did not fail the run")
	}
	cfg.Resume, cfg.Plan = true, map[string]any{"samples": 4, "run": "r"}
	var pm *PlanMismatchError
	if _, err := Run(context.Background(), cfg); !errors.As(err, &pm) {
		t.Fatalf("resume with another plan: %v, want PlanMismatchError", err)
	}
	cfg.Plan = map[string]any{"run": "r", "samples": 8}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("resume with the same plan: %v", err)
	}
}

func TestTrainerCommand(t *testing.T) {
	for _, tc := range []struct {
		template string
		vars     TrainerVars
		want     string
		err      string
	}{
		{template: DefaultTrainer, vars: TrainerVars{Model: "Qwen/Qwen3-4B", Init: "/a/it0", Out: "/a/it1", Shards: "/s", Run: "r", Iteration: 1},
			want: "a2farm-train --model Qwen/Qwen3-4B --init-adapter /a/it0 --out /a/it1 --run r --iteration 1 /s"},
		{template: DefaultTrainer, vars: TrainerVars{Model: "m", Out: "/a/it0", Shards: "/w/shards", Run: "r", SFT: true, Resume: true},
			want: "a2farm-train --model m --out /a/it0 --run r --iteration 0 --sft --resume /w/shards"},
		{template: DefaultTrainer, vars: TrainerVars{Model: "m", Out: "/a/it2.partial", Shards: "/s", Run: "r", Iteration: 2, Logs: "/a b/logs"},
			want: "a2farm-train --model m --out /a/it2.partial --run r --iteration 2 --report-to tensorboard --logging-dir '/a b/logs' --tracker-run it2 /s"},
		{template: "train {out} {shards}", vars: TrainerVars{Out: "/my adapters/it's", Shards: "/s"},
			want: `train '/my adapters/it'\''s' /s`},
		{template: "train {shards}", err: "has no {out}"},
		{template: "train {out} {epochs}", vars: TrainerVars{Out: "/o"}, err: "unknown placeholder {epochs}"},
	} {
		got, err := TrainerCommand(tc.template, tc.vars)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.template, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v\nwant %q", tc.template, got, err, tc.want)
		}
	}
}

// TestRunTrainerForwardsCtrlC: a stop request reaches the whole trainer
// command (here a shell that traps SIGINT to write its checkpoint), which
// gets the grace to finish; a trainer that ignores it is killed after it.
func TestRunTrainerForwardsCtrlC(t *testing.T) {
	dir := t.TempDir()
	var buf strings.Builder
	out := &lockedWriter{b: &buf}
	ctx, cancel := context.WithCancel(context.Background())
	line := "trap 'echo saved > " + dir + "/ckpt; exit 130' INT; echo started; while :; do sleep 0.05; done"
	done := make(chan error, 1)
	go func() { done <- RunTrainer(ctx, line, out, 10*time.Second) }()
	waitFor(t, func() bool { return out.has("started") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunTrainer: %v, want the context's error", err)
	}
	if data, err := readFile(dir + "/ckpt"); err != nil || strings.TrimSpace(data) != "saved" {
		t.Errorf("the trainer did not get SIGINT: %q, %v", data, err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- RunTrainer(ctx, "trap '' INT; echo deaf; sleep 60", out, 100*time.Millisecond) }()
	waitFor(t, func() bool { return out.has("deaf") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunTrainer: %v, want the context's error after the kill", err)
	}

	if err := RunTrainer(context.Background(), "exit 7", out, time.Second); err == nil || !strings.Contains(err.Error(), "the trainer exited 7 (exit 7)") {
		t.Errorf("exit 7: %v", err)
	}
}

// lockedWriter is a strings.Builder the trainer's output goroutine and the
// test may touch at once.
type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) has(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Contains(w.b.String(), s)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

func readFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	return string(data), err
}

// TestARowsScalars: what a dashboard gets of a row — a skipped training and
// a missing evaluation are left out, not plotted as zeros.
func TestARowsScalars(t *testing.T) {
	row := Row{Iteration: 2,
		Rollout: &RolloutResult{Trajectories: 12, Rows: 30, AdvantageMean: 0.1, AdvantageStd: 0.5, WeightMean: 1.2, DCGapFile: 0.25},
		Train:   &TrainResult{Adapter: "a", Steps: 4, LossFirst: 2, LossLast: 1.5, SecondsPerStep: 3, TokensPerSecond: 900},
		Eval: &EvalResult{Instances: 6, F1: map[string]float64{"file": 0.5, "module": 0.25, "function": 0.125},
			Precision: map[string]float64{"file": 0.4}, Recall: map[string]float64{"file": 0.6}, DCGapFile: 0.3},
		Seconds: map[Step]float64{StepServe: 1, StepRollout: 20}}
	want := map[string]float64{"rollout/trajectories": 12, "rollout/rows": 30, "rollout/advantage_mean": 0.1,
		"rollout/advantage_std": 0.5, "rollout/weight_mean": 1.2, "rollout/dc_gap_file": 0.25,
		"train/steps": 4, "train/loss_first": 2, "train/loss_last": 1.5, "train/seconds_per_step": 3, "train/tokens_per_second": 900,
		"eval/file_f1": 0.5, "eval/module_f1": 0.25, "eval/function_f1": 0.125, "eval/file_precision": 0.4, "eval/file_recall": 0.6,
		"eval/dc_gap_file": 0.3, "seconds/serve": 1, "seconds/rollout": 20}
	if got := row.Scalars(); !maps.Equal(got, want) {
		t.Errorf("scalars\n%v\nwant\n%v", got, want)
	}
	acting, staleness := 1, 1
	row.Acting, row.Staleness = &acting, &staleness
	if got := row.Scalars(); got["async/acting_version"] != 1 || got["async/staleness"] != 1 {
		t.Errorf("an asynchronous round's scalars lack its acting version and staleness: %v", got)
	}
	row.Train, row.Eval = &TrainResult{Adapter: "a", Skipped: "no row"}, nil
	for tag := range row.Scalars() {
		if strings.HasPrefix(tag, "train/") || strings.HasPrefix(tag, "eval/") {
			t.Errorf("a skipped training and no evaluation still plot %s", tag)
		}
	}
}

// Package iterate drives a run's rollout–training iterations: for k = 1..K,
// serve adapter k−1 on every replica, roll out iteration k with it, train
// adapter k on iteration k's shards, evaluate it, and write a report row.
// The driver's state is a file: every finished step is recorded there before
// the next begins, so an interrupted driver resumes at the step it stopped
// in and never repeats a finished one. What each step does is the caller's
// (Steps); the order, the record and the report are this package's.
package iterate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/a2farm/a2farm/internal/atomicfile"
)

// StateFormat versions the state file.
const StateFormat = "a2farm-iterate/1"

// StateName is the state file's name in the driver's folder.
const StateName = "iterate.json"

// Step names one step of an iteration, in the order they run.
type Step string

// The steps of iteration k. Iteration 0 is the optional warm-up: a teacher
// plays the training set (StepRollout) and adapter 0 is trained on its SFT
// shards (StepTrain); it is neither served first nor evaluated.
const (
	StepServe    Step = "serve"    // adapter k−1 loaded and confirmed on every replica
	StepRollout  Step = "rollout"  // iteration k published, answered and sharded
	StepTrain    Step = "train"    // adapter k trained on iteration k's shards
	StepEvaluate Step = "evaluate" // adapter k scored greedily on the held-out set
)

// Steps are what the driver runs; each must be safe to run again after an
// interruption (it is, when it finished nothing the state recorded). The
// driver names the adapter each step works with, from its state: which
// adapter the policy has after an iteration is what that iteration's
// training step recorded, never what a folder on disk looks like.
type Steps interface {
	// Serve makes a — adapter k−1, or the base model — served by every
	// replica and confirmed there; older are the run's earlier versions,
	// which no rollout uses any more once a is served.
	Serve(ctx context.Context, k int, a Adapter, older []Adapter) error
	// Rollout publishes iteration k, played by a (k = 0: the teacher's
	// warm-up), and returns once its groups are sharded.
	Rollout(ctx context.Context, k int, a Adapter) (RolloutResult, error)
	// Train trains adapter k from init on iteration k's shards; rollout is
	// what the rollout step recorded of them (a row count of 0: nothing to
	// train on: adapter k is then init, and the result says why).
	Train(ctx context.Context, k int, init Adapter, rollout RolloutResult) (TrainResult, error)
	// Evaluate scores a, the adapter after iteration k, on the held-out
	// set (ok false: none given).
	Evaluate(ctx context.Context, k int, a Adapter) (EvalResult, bool, error)
}

// Adapter is one version of the policy: the adapter iteration Version
// trained, in Path. Base, version −1 with no path, is the base model.
type Adapter struct {
	Version int
	Path    string
}

// Base is the base model, before any adapter.
var Base = Adapter{Version: -1}

// versionsBefore lists the adapters the run had before version v: initial
// (when it is one) and what each iteration's training recorded.
func (s *State) versionsBefore(v int, initial Adapter) []Adapter {
	var out []Adapter
	if initial.Version >= 0 && initial.Version < v {
		out = append(out, initial)
	}
	for _, r := range s.Rows {
		if a, ok := r.trained(); ok && a.Version < v && a != initial {
			out = append(out, a)
		}
	}
	return out
}

// adapterAfter is the adapter the policy has after iteration k: the one the
// latest iteration j ≤ k trained, else initial.
func (s *State) adapterAfter(k int, initial Adapter) Adapter {
	best := initial
	bestIt := -1
	for _, r := range s.Rows {
		if a, ok := r.trained(); ok && a.Version <= k && a.Version > bestIt {
			best, bestIt = a, a.Version
		}
	}
	return best
}

// trained is the adapter the row's training step made (ok false: it has
// not run, or it trained nothing and the row keeps the adapter before).
func (r Row) trained() (Adapter, bool) {
	if t := r.Train; t != nil && t.Skipped == "" && t.Adapter != "" {
		return Adapter{Version: r.Iteration, Path: t.Adapter}, true
	}
	return Adapter{}, false
}

// RolloutResult is what a report row says of a rollout.
type RolloutResult struct {
	Model         string  `json:"model"`
	Jobs          int     `json:"jobs"`
	Groups        int     `json:"groups"`
	Trajectories  int     `json:"trajectories"`
	Rows          int     `json:"rows"`
	Steps         int     `json:"steps"`
	AdvantageMean float64 `json:"advantage_mean"`
	AdvantageStd  float64 `json:"advantage_std"`
	WeightMean    float64 `json:"weight_mean"`
	DCGapFile     float64 `json:"dc_gap_file"`
	// The warm-up's: how many times the teacher played the unsolved
	// instances, and how many of the instances it solved (a trajectory
	// matching the gold at every level, which becomes SFT rows).
	Tries     int `json:"tries,omitempty"`
	Instances int `json:"instances,omitempty"`
	Solved    int `json:"solved,omitempty"`
}

// TrainResult is what a report row says of training.
type TrainResult struct {
	Adapter         string  `json:"adapter"`
	Steps           int     `json:"steps"`
	LossFirst       float64 `json:"loss_first"`
	LossLast        float64 `json:"loss_last"`
	SecondsPerStep  float64 `json:"seconds_per_step"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	// Skipped says why no adapter was trained (no turn carried a weight):
	// adapter k is then adapter k−1.
	Skipped string `json:"skipped,omitempty"`
}

// EvalResult is a held-out evaluation: F1 per level and the file-level
// discovery–commit gap.
type EvalResult struct {
	Instances int                `json:"instances"`
	F1        map[string]float64 `json:"f1"`
	// Precision and Recall are the same levels' precision@k and recall@k.
	Precision map[string]float64 `json:"precision,omitempty"`
	Recall    map[string]float64 `json:"recall,omitempty"`
	DCGapFile float64            `json:"dc_gap_file"`
}

// Row is the report row of one iteration.
type Row struct {
	Iteration int              `json:"iteration"`
	Rollout   *RolloutResult   `json:"rollout,omitempty"`
	Train     *TrainResult     `json:"train,omitempty"`
	Eval      *EvalResult      `json:"eval,omitempty"`
	Seconds   map[Step]float64 `json:"seconds"`
	// Acting is the version of the adapter that played the round (−1: the
	// base model), and Staleness how many adapters were trained between it
	// and the round's own: asynchronous iterations only.
	Acting    *int `json:"acting_version,omitempty"`
	Staleness *int `json:"staleness,omitempty"`
}

// Scalars are the row's figures as a dashboard plots them, by tag: the
// rollout's, the training's, the evaluation's at each level, each step's
// seconds, and an asynchronous round's acting version and staleness.
// What the row lacks (a skipped training, no evaluation) is left out.
func (r Row) Scalars() map[string]float64 {
	out := map[string]float64{}
	if ro := r.Rollout; ro != nil {
		out["rollout/trajectories"] = float64(ro.Trajectories)
		out["rollout/rows"] = float64(ro.Rows)
		out["rollout/advantage_mean"] = ro.AdvantageMean
		out["rollout/advantage_std"] = ro.AdvantageStd
		out["rollout/weight_mean"] = ro.WeightMean
		out["rollout/dc_gap_file"] = ro.DCGapFile
		if ro.Tries > 0 {
			out["rollout/teacher_tries"] = float64(ro.Tries)
			out["rollout/teacher_solved"] = float64(ro.Solved)
		}
	}
	if t := r.Train; t != nil && t.Skipped == "" && t.Steps > 0 {
		out["train/steps"] = float64(t.Steps)
		out["train/loss_first"] = t.LossFirst
		out["train/loss_last"] = t.LossLast
		out["train/seconds_per_step"] = t.SecondsPerStep
		out["train/tokens_per_second"] = t.TokensPerSecond
	}
	if ev := r.Eval; ev != nil {
		for name, m := range map[string]map[string]float64{"f1": ev.F1, "precision": ev.Precision, "recall": ev.Recall} {
			for level, v := range m {
				out["eval/"+level+"_"+name] = v
			}
		}
		out["eval/dc_gap_file"] = ev.DCGapFile
	}
	for step, secs := range r.Seconds {
		out["seconds/"+string(step)] = secs
	}
	if r.Acting != nil {
		out["async/acting_version"] = float64(*r.Acting)
	}
	if r.Staleness != nil {
		out["async/staleness"] = float64(*r.Staleness)
	}
	return out
}

// Done is one finished step.
type Done struct {
	Iteration int       `json:"iteration"`
	Step      Step      `json:"step"`
	At        time.Time `json:"at"`
	Seconds   float64   `json:"seconds"`
}

// State is the driver's record on disk.
type State struct {
	Format string `json:"format"`
	// Plan fingerprints what the driver was started with; a resume with
	// another plan is refused.
	Plan json.RawMessage `json:"plan"`
	Done []Done          `json:"done"`
	Rows []Row           `json:"rows"`
	// Async and Retired are asynchronous iterations': the loop's stats,
	// and the versions unloaded from the replicas.
	Async   *AsyncStats `json:"async,omitempty"`
	Retired []int       `json:"retired,omitempty"`
}

func (s *State) done(k int, step Step) bool {
	return slices.ContainsFunc(s.Done, func(d Done) bool { return d.Iteration == k && d.Step == step })
}

func (s *State) row(k int) *Row {
	for i := range s.Rows {
		if s.Rows[i].Iteration == k {
			return &s.Rows[i]
		}
	}
	s.Rows = append(s.Rows, Row{Iteration: k, Seconds: map[Step]float64{}})
	return &s.Rows[len(s.Rows)-1]
}

// Config configures a Driver.
type Config struct {
	// Dir holds the state file.
	Dir string
	// Iterations is K; Warmup adds iteration 0 before them.
	Iterations int
	Warmup     bool
	// Plan is what the run was started with (flags, paths), recorded and
	// compared on resume.
	Plan any
	// Resume continues the state in Dir; without it a Dir with a state is
	// refused.
	Resume bool
	// Initial is the adapter the policy starts from (--init-adapter, as
	// version 0), else Base.
	Initial Adapter
	Steps   Steps
	// OnStep is told when a step starts and ends (err nil: it finished).
	OnStep func(k int, step Step, finished bool, err error)
	// OnRow is told each iteration's row when its last step finished.
	OnRow func(Row)
}

// ErrStateExists refuses to start over a folder holding a driver's state.
var ErrStateExists = errors.New("holds the state of an earlier iterate run")

// PlanMismatchError refuses a resume with another plan.
type PlanMismatchError struct{ Path string }

func (e *PlanMismatchError) Error() string {
	return fmt.Sprintf("%s was started with other settings: resume with the same flags, or use another folder", e.Path)
}

// StepError is a step that failed: it names the iteration and the step.
type StepError struct {
	Iteration int
	Step      Step
	Err       error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("iteration %d, step %s: %v", e.Iteration, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Run runs every step the state does not record as finished, in order,
// recording each as it finishes. It returns the rows of every iteration.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if cfg.Iterations < 1 {
		return nil, fmt.Errorf("iterations %d: want 1 or more", cfg.Iterations)
	}
	st, path, err := openState(cfg.Dir, cfg.Plan, cfg.Resume)
	if err != nil {
		return nil, err
	}
	first := 1
	if cfg.Warmup {
		first = 0
	}
	for k := first; k <= cfg.Iterations; k++ {
		for _, step := range stepsOf(k) {
			if st.done(k, step) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return st.Rows, err
			}
			if cfg.OnStep != nil {
				cfg.OnStep(k, step, false, nil)
			}
			start := time.Now()
			err := runStep(ctx, cfg.Steps, k, step, st, cfg.Initial)
			if cfg.OnStep != nil {
				cfg.OnStep(k, step, err == nil, err)
			}
			if err != nil {
				return st.Rows, &StepError{Iteration: k, Step: step, Err: err}
			}
			secs := time.Since(start).Seconds()
			st.row(k).Seconds[step] = secs
			st.Done = append(st.Done, Done{Iteration: k, Step: step, At: time.Now().UTC(), Seconds: secs})
			if err := save(path, st); err != nil {
				return st.Rows, err
			}
		}
		if cfg.OnRow != nil {
			cfg.OnRow(*st.row(k))
		}
	}
	return st.Rows, nil
}

// openState reads the state in dir to resume it, or starts one: a state
// without resume, or resumed with another plan, is refused.
func openState(dir string, plan any, resume bool) (*State, string, error) {
	fingerprint, err := json.Marshal(plan)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, StateName)
	st, err := load(path)
	switch {
	case err != nil:
		return nil, "", err
	case st != nil && !resume:
		return nil, "", fmt.Errorf("%s %w: pass --resume to continue it, or use another folder", dir, ErrStateExists)
	case st != nil && !samePlan(st.Plan, fingerprint):
		return nil, "", &PlanMismatchError{Path: path}
	case st == nil:
		st = &State{Format: StateFormat, Plan: fingerprint}
		if err := save(path, st); err != nil {
			return nil, "", err
		}
	}
	return st, path, nil
}

// samePlan compares two plans as JSON values (the state file indents its
// copy).
func samePlan(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// stepsOf lists iteration k's steps: the warm-up only rolls out and trains.
func stepsOf(k int) []Step {
	if k == 0 {
		return []Step{StepRollout, StepTrain}
	}
	return []Step{StepServe, StepRollout, StepTrain, StepEvaluate}
}

func runStep(ctx context.Context, s Steps, k int, step Step, st *State, initial Adapter) error {
	row := st.row(k)
	before := st.adapterAfter(k-1, initial)
	switch step {
	case StepServe:
		return s.Serve(ctx, k, before, st.versionsBefore(before.Version, initial))
	case StepRollout:
		r, err := s.Rollout(ctx, k, before)
		if err == nil {
			row.Rollout = &r
		}
		return err
	case StepTrain:
		if row.Rollout == nil {
			return fmt.Errorf("iteration %d: no rollout recorded to train on", k)
		}
		r, err := s.Train(ctx, k, before, *row.Rollout)
		if err == nil {
			row.Train = &r
		}
		return err
	case StepEvaluate:
		r, ok, err := s.Evaluate(ctx, k, st.adapterAfter(k, initial))
		if err == nil && ok {
			row.Eval = &r
		}
		return err
	}
	return fmt.Errorf("unknown step %q", step)
}

// Load reads the state in dir (nil when there is none).
func Load(dir string) (*State, error) { return load(filepath.Join(dir, StateName)) }

func load(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Format != StateFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", path, st.Format, StateFormat)
	}
	return &st, nil
}

func save(path string, st *State) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(st)
	})
}

package iterate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// DefaultTrainer is the trainer command template: a2farm-train on one
// machine. Every {name} is replaced by the value of the iteration, shell-
// quoted; {init}, {resume}, {sft} and {report} expand to whole flags or to
// nothing.
const DefaultTrainer = "a2farm-train --model {model} {init} --out {out} --run {run} --iteration {iteration} {sft} {resume} {report} {shards}"

// TrainerVars are the values a trainer command template receives.
type TrainerVars struct {
	Model     string // the base model the adapter is trained on
	Init      string // adapter k−1's folder; empty for none
	Out       string // adapter k's folder
	Shards    string // the shards tree
	Run       string
	Iteration int
	Resume    bool // the trainer left a checkpoint: continue it
	SFT       bool // the warm-up: SFT shards
	// Logs, when set, is the folder of the loop's TensorBoard dashboard:
	// the trainer logs its steps there as run it<k>, beside the driver's own.
	Logs string
}

// TrainerCommand expands a template into a shell command line.
func TrainerCommand(template string, v TrainerVars) (string, error) {
	init := ""
	if v.Init != "" {
		init = "--init-adapter " + quote(v.Init)
	}
	resume := ""
	if v.Resume {
		resume = "--resume"
	}
	sft := ""
	if v.SFT {
		sft = "--sft"
	}
	report := ""
	if v.Logs != "" {
		report = fmt.Sprintf("--report-to tensorboard --logging-dir %s --tracker-run it%d", quote(v.Logs), v.Iteration)
	}
	vars := map[string]string{
		"{model}": quote(v.Model), "{init}": init, "{out}": quote(v.Out), "{shards}": quote(v.Shards),
		"{run}": quote(v.Run), "{iteration}": fmt.Sprint(v.Iteration), "{resume}": resume, "{sft}": sft,
		"{report}": report,
	}
	if !strings.Contains(template, "{out}") {
		return "", fmt.Errorf("trainer template %q has no {out}: the driver must say where adapter k goes", template)
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		pairs = append(pairs, k, vars[k])
	}
	out := strings.NewReplacer(pairs...).Replace(template)
	if i := strings.IndexByte(out, '{'); i >= 0 {
		if j := strings.IndexByte(out[i:], '}'); j > 0 && !strings.ContainsAny(out[i:i+j], " \t") {
			return "", fmt.Errorf("trainer template: unknown placeholder %s (known: {model} {init} {out} {shards} {run} {iteration} {resume} {sft} {report})", out[i:i+j+1])
		}
	}
	return strings.Join(strings.Fields(out), " "), nil
}

// quote makes s one shell word.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=+@,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RunTrainer runs a command line through the shell, its output to w. When
// ctx ends the command is sent SIGINT (the trainer saves a checkpoint and
// exits 130) and, if it has not stopped within grace, killed.
func RunTrainer(ctx context.Context, line string, w io.Writer, grace time.Duration) error {
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the signal goes to the whole command
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the trainer: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitError(line, err)
	case <-ctx.Done():
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	return ctx.Err()
}

// TrainerExit is a trainer command that exited non-zero.
type TrainerExit struct {
	Code int
	Line string
}

func (e *TrainerExit) Error() string {
	return fmt.Sprintf("the trainer exited %d (%s)", e.Code, e.Line)
}

// Refused says the trainer refused its input (exit 2, a2farm-train's code
// for bad flags or shards): running it again would refuse it again.
func (e *TrainerExit) Refused() bool { return e.Code == 2 }

func exitError(line string, err error) error {
	if err == nil {
		return nil
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return &TrainerExit{Code: ee.ExitCode(), Line: line}
	}
	return fmt.Errorf("the trainer: %w (%s)", err, line)
}

// TrainManifestName is the record a2farm-train writes into a finished
// adapter, last.
const TrainManifestName = "train_manifest.json"

// IsAdapter checks that dir holds a PEFT adapter.
func IsAdapter(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err != nil {
		return errors.New("no adapter_config.json (not a PEFT adapter folder)")
	}
	return nil
}

// Train trains an adapter into final with the trainer command template:
// the trainer writes into final + ".partial", and that folder is renamed
// into final once the trainer has exited 0 with an adapter there, so a
// folder at final is always whole and a resumed step finds it finished.
// Aside it keeps only a2farm-train's finished adapter (a2farm-train writes
// its manifest last and renames the whole folder into place); whatever
// another trainer left there may be half-written and is trained again. A
// checkpoint an interrupted trainer left (final + ".partial.checkpoint")
// is handed on as {resume}. announce is told the command line before it
// runs; the trainer's output goes to w.
func Train(ctx context.Context, final, template string, v TrainerVars, grace time.Duration, announce func(line string), w io.Writer) (TrainResult, error) {
	if IsAdapter(final) == nil {
		return TrainStats(final)
	}
	v.Out = final + ".partial"
	if _, err := os.Stat(filepath.Join(v.Out, TrainManifestName)); err != nil {
		if err := os.RemoveAll(v.Out); err != nil {
			return TrainResult{}, err
		}
		_, ckptErr := os.Stat(v.Out + ".checkpoint")
		v.Resume = ckptErr == nil
		line, err := TrainerCommand(template, v)
		if err != nil {
			return TrainResult{}, err
		}
		announce(line)
		if err := RunTrainer(ctx, line, w, grace); err != nil {
			return TrainResult{}, err
		}
	}
	if err := IsAdapter(v.Out); err != nil {
		return TrainResult{}, fmt.Errorf("the trainer exited 0 but %s holds no adapter: %v", v.Out, err)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return TrainResult{}, err
	}
	if err := os.Rename(v.Out, final); err != nil {
		return TrainResult{}, fmt.Errorf("install adapter %s: %w", final, err)
	}
	return TrainStats(final)
}

// TrainStats reads what the trainer's manifest in an adapter folder says of
// its run; an adapter another trainer made has none, and no figures.
func TrainStats(dir string) (TrainResult, error) {
	data, err := os.ReadFile(filepath.Join(dir, TrainManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return TrainResult{Adapter: dir}, nil
	}
	if err != nil {
		return TrainResult{}, err
	}
	var m struct {
		Steps []struct {
			Loss    float64 `json:"loss"`
			Seconds float64 `json:"seconds"`
		} `json:"steps"`
		TokensPerSecond float64 `json:"tokens_per_second"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return TrainResult{}, fmt.Errorf("%s: %w", filepath.Join(dir, TrainManifestName), err)
	}
	r := TrainResult{Adapter: dir, Steps: len(m.Steps), TokensPerSecond: m.TokensPerSecond}
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

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/worker/policy"
)

// The driver's paths that need no trained adapter: what stops it before
// publishing, what a failed trainer says, and what --resume repeats. The
// loop end to end, with the real trainer and the stand-in server on a tiny
// model, is trainer/tests/test_iterate.py.

// iterateFixture is the built-in sample, two LoRA-serving replicas and an
// adapter 0 they accept.
type iterateFixture struct {
	dataset, repos, init, out string
	a, b                      *policytest.Replica
}

func newIterateFixture(t *testing.T) *iterateFixture {
	t.Helper()
	dir := t.TempDir()
	sample := filepath.Join(dir, "sample")
	if code, _, errOut := run(t, "sample", "--out", sample); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	init := filepath.Join(dir, "sft")
	if err := os.MkdirAll(init, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(init, "adapter_config.json"), []byte(`{"r": 16}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &iterateFixture{dataset: filepath.Join(sample, "dataset.jsonl"), repos: filepath.Join(sample, "repos"), init: init,
		out: filepath.Join(dir, "iterate"),
		a:   policytest.NewReplica(t, 5*time.Millisecond, policy.DefaultEpisodeHeader),
		b:   policytest.NewReplica(t, 5*time.Millisecond, policy.DefaultEpisodeHeader)}
	f.a.EnableLoRA("base")
	f.b.EnableLoRA("base")
	return f
}

func (f *iterateFixture) args(trainer string, extra ...string) []string {
	return append([]string{"iterate", "--run", "r", "--dataset", f.dataset, "--repos", f.repos, "--out", f.out,
		"--model", "base", "--base-url", f.a.URL, "--base-url", f.b.URL, "--init-adapter", f.init,
		"--samples", "2", "--iterations", "2", "--workers", "1", "--concurrency", "4", "--trainer", trainer}, extra...)
}

// episodes counts the chat requests the replicas served with a model.
func (f *iterateFixture) episodes(model string) int { return f.a.Served()[model] + f.b.Served()[model] }

// TestIterateStopsBeforePublishingWhenALoadIsNotConfirmed: a replica
// answers the load of adapter 0 with 200 but never lists it (as vLLM has
// for a path it could not read). The driver stops in the serve step with
// one line naming that replica, and publishes nothing: no episode runs.
func TestIterateStopsBeforePublishingWhenALoadIsNotConfirmed(t *testing.T) {
	f := newIterateFixture(t)
	f.b.IgnoreLoads(true)
	code, _, errOut := run(t, f.args("exit 3 {out}")...)
	if code != exitError {
		t.Fatalf("exit %d, want %d\n%s", code, exitError, errOut)
	}
	want := "a2farm: iteration 1, step serve: replica " + f.b.URL + ": the load of r-it0 answered, but /v1/models does not list it"
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr does not say %q:\n%s", want, errOut)
	}
	if n := f.episodes("r-it0"); n != 1 { // the confirming request on a, none on b, no episode
		t.Errorf("%d requests with r-it0, want the one that confirmed it on the first replica", n)
	}
	st, err := iterate.Load(f.out)
	if err != nil || st == nil || len(st.Done) != 0 {
		t.Errorf("state after the failed serve: %+v, %v; want no finished step", st, err)
	}
}

// TestIterateTrainerFailureNamesTheStepAndResumeDoesNotRepeat: adapter 0
// is served and iteration 1 rolled out; the trainer exits 3, and the
// driver exits 1 naming the iteration and step. --resume starts at the
// training step again: no adapter load or episode is repeated.
func TestIterateTrainerFailureNamesTheStepAndResumeDoesNotRepeat(t *testing.T) {
	f := newIterateFixture(t)
	code, _, errOut := run(t, f.args("exit 3 {out}")...)
	if code != exitError || !strings.Contains(errOut, "a2farm: iteration 1, step train: the trainer exited 3") {
		t.Fatalf("exit %d, want 1 naming the step\n%s", code, errOut)
	}
	for _, r := range []*policytest.Replica{f.a, f.b} {
		if loads := r.Loads(); len(loads) != 1 || loads[0] != (policytest.Load{Op: "load", Name: "r-it0", Path: f.init}) {
			t.Errorf("replica %s received %v, want adapter 0 loaded once as r-it0", r.URL, loads)
		}
	}
	played := f.episodes("r-it0")
	if played < 2*6*3 { // 6 instances × 2 samples × 3 turns, plus the confirming requests
		t.Fatalf("%d requests with r-it0: iteration 1 did not roll out with adapter 0", played)
	}
	st, err := iterate.Load(f.out)
	if err != nil || len(st.Done) != 2 || st.Done[0].Step != iterate.StepServe || st.Done[1].Step != iterate.StepRollout {
		t.Fatalf("state: %+v, %v; want serve and rollout of iteration 1 done", st, err)
	}

	code, _, errOut = run(t, f.args("exit 4 {out}", "--resume")...)
	if code != exitError || !strings.Contains(errOut, "step train: the trainer exited 4") {
		t.Fatalf("resume: exit %d\n%s", code, errOut)
	}
	if strings.Contains(errOut, "iteration 1: serve") || strings.Contains(errOut, "iteration 1: rollout") {
		t.Errorf("resume ran a finished step again:\n%s", errOut)
	}
	if n := f.episodes("r-it0"); n != played || len(f.a.Loads()) != 1 {
		t.Errorf("resume sent %d more requests and %d loads", n-played, len(f.a.Loads())-1)
	}

	code, _, errOut = run(t, f.args("exit 4 {out}")...)
	if code != exitUsage || !strings.Contains(errOut, "holds an iterate run") {
		t.Errorf("again without --resume: exit %d\n%s", code, errOut)
	}
	code, _, errOut = run(t, f.args("exit 4 {out}", "--resume", "--samples", "3")...)
	if code != exitUsage || !strings.Contains(errOut, "was started with other settings") {
		t.Errorf("resume with other samples: exit %d\n%s", code, errOut)
	}
}

// TestIterateCtrlCInTheRolloutThenResume: a stop request while iteration
// 1 rolls out exits 130 naming the step; --resume publishes only the jobs
// still missing and goes on to the next step.
func TestIterateCtrlCInTheRolloutThenResume(t *testing.T) {
	f := newIterateFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for f.episodes("r-it0") < 8 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	var out, errOut bytes.Buffer
	code := Run(ctx, nil, f.args("exit 3 {out}"), &out, &errOut)
	if code != exitInterrupted || !strings.Contains(errOut.String(), "stopped in iteration 1, step rollout") {
		t.Fatalf("exit %d, want 130 naming the step\n%s", code, errOut.String())
	}
	code, _, resumed := run(t, f.args("exit 3 {out}", "--resume")...)
	if code != exitError || !strings.Contains(resumed, "iteration 1: rollout…") || !strings.Contains(resumed, "step train: the trainer exited 3") {
		t.Fatalf("resume: exit %d\n%s", code, resumed)
	}
	if strings.Contains(resumed, "iteration 1: serve…") {
		t.Errorf("resume served adapter 0 again:\n%s", resumed)
	}
	st, err := iterate.Load(f.out)
	if err != nil || len(st.Rows) != 1 || st.Rows[0].Rollout == nil || st.Rows[0].Rollout.Jobs != 12 {
		t.Fatalf("state: %+v, %v; want iteration 1's rollout of 12 jobs", st, err)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
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
	return newIterateFixtureAt(t, 5*time.Millisecond)
}

// newIterateFixtureAt is newIterateFixture with replicas that take latency
// per request.
func newIterateFixtureAt(t *testing.T, latency time.Duration) *iterateFixture {
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
		a:   policytest.NewReplica(t, latency, policy.DefaultEpisodeHeader),
		b:   policytest.NewReplica(t, latency, policy.DefaultEpisodeHeader)}
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

// TestAHalfWrittenAdapterIsTrainedAgain: a trainer that wrote part of an
// adapter (its config) and then failed leaves nothing that a resume counts
// as adapter 1 — the trainer writes aside and the step installs the folder
// only after an exit 0 — so --resume trains iteration 1 again instead of
// serving the fragment to iteration 2 (as it did when any folder with an
// adapter_config.json counted as finished). Once adapter 1 is served,
// adapter 0 is unloaded from the replicas, its folder kept.
func TestAHalfWrittenAdapterIsTrainedAgain(t *testing.T) {
	f := newIterateFixture(t)
	halfThenFail := "mkdir -p {out} && touch {out}/adapter_config.json && exit 3"
	code, _, errOut := run(t, f.args(halfThenFail)...)
	if code != exitError || !strings.Contains(errOut, "iteration 1, step train: the trainer exited 3") {
		t.Fatalf("exit %d, want 1 naming iteration 1's training\n%s", code, errOut)
	}
	it1 := filepath.Join(f.out, "adapters", "it1")
	if _, err := os.Stat(it1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after a failed trainer: %v, want nothing there", it1, err)
	}
	code, _, errOut = run(t, f.args("exit 4 {out}", "--resume")...)
	if code != exitError || !strings.Contains(errOut, "iteration 1, step train: the trainer exited 4") {
		t.Fatalf("resume: exit %d, want iteration 1 trained again (and failing with 4)\n%s", code, errOut)
	}
	for _, r := range []*policytest.Replica{f.a, f.b} {
		for _, l := range r.Loads() {
			if l.Name == "r-it1" {
				t.Errorf("replica %s was loaded the half-written adapter: %+v", r.URL, l)
			}
		}
	}

	// A trainer that finishes: its folder is installed as adapter 1.
	// It finishes with the dashboard on: the trainer gets {report}, and the
	// driver writes its own event file beside the trainer's runs.
	code, _, errOut = run(t, f.args("mkdir -p {out} && touch {out}/adapter_config.json && echo {report} > {out}/report-flags",
		"--resume", "--report-to", "tensorboard")...)
	if code != 0 {
		t.Fatalf("resume with a trainer that finishes: exit %d\n%s", code, errOut)
	}
	logs := filepath.Join(f.out, "logs")
	if data, err := os.ReadFile(filepath.Join(it1, "report-flags")); err != nil ||
		strings.TrimSpace(string(data)) != "--report-to tensorboard --logging-dir "+logs+" --tracker-run it1" {
		t.Errorf("the trainer's {report}: %q, %v", data, err)
	}
	if events, _ := filepath.Glob(filepath.Join(logs, "iterate", "events.out.tfevents.*")); len(events) != 1 {
		t.Errorf("the driver's event files: %v, want one", events)
	}
	if code, _, errOut := run(t, f.args("exit 0 {out}", "--resume", "--report-to", "wandb")...); code != exitUsage ||
		!strings.Contains(errOut, `--report-to "wandb": want tensorboard or none`) {
		t.Errorf("--report-to wandb: exit %d\n%s", code, errOut)
	}
	for _, k := range []string{"it1", "it2"} {
		if err := iterate.IsAdapter(filepath.Join(f.out, "adapters", k)); err != nil {
			t.Errorf("adapter %s: %v", k, err)
		}
		if _, err := os.Stat(filepath.Join(f.out, "adapters", k+".partial")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s.partial left behind: %v", k, err)
		}
	}
	// Iteration 2 is served adapter 1 and adapter 0 is unloaded: no rollout
	// uses it any more. No adapter folder is deleted.
	want := []policytest.Load{{Op: "load", Name: "r-it0", Path: f.init}, {Op: "load", Name: "r-it1", Path: it1},
		{Op: "unload", Name: "r-it0"}}
	for _, r := range []*policytest.Replica{f.a, f.b} {
		if loads := r.Loads(); !slices.Equal(loads, want) {
			t.Errorf("replica %s received %v, want %v", r.URL, loads, want)
		}
	}
	if err := iterate.IsAdapter(f.init); err != nil {
		t.Errorf("adapter 0's folder: %v", err)
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

// TestIterateWarmupPlaysUnsolvedInstancesAgainAndTrainsAdapter0: the
// teacher answers the gold except for one instance it solves at its second
// try and one it never solves. With --teacher-tries 3 the driver plays each
// instance until it is solved or has had three tries (one whose gold names
// no function cannot be solved and is played once) — through a Ctrl-C in
// the first try and --resume, which plays nothing twice — writes SFT shards of the solved ones'
// best trajectories, trains adapter 0 with {sft} from the base model, and
// serves it for iteration 1 as r-it0.
func TestIterateWarmupPlaysUnsolvedInstancesAgainAndTrainsAdapter0(t *testing.T) {
	f := newIterateFixture(t)
	instances := goldRows(t, f.dataset, f.repos)
	late, never, noFunction := instances[1].InstanceID, instances[2].InstanceID, instances[3].InstanceID
	if len(instances[3].FileChanges[0].Changes.Entities) != 0 {
		t.Fatalf("the sample's fourth instance edits a function: %+v", instances[3])
	}
	var mu sync.Mutex
	plays := map[string]int{}
	teacher := policytest.NewRecorder(t, func(req policytest.Request) policytest.Reply {
		var in goldRow
		for _, cand := range instances {
			if len(req.Messages) > 1 && strings.Contains(req.Messages[1].Content, cand.ProblemStatement) {
				in = cand
			}
		}
		mu.Lock()
		plays[in.InstanceID]++
		try := plays[in.InstanceID]
		mu.Unlock()
		answer := in.answer()
		if in.InstanceID == never || in.InstanceID == late && try == 1 {
			answer = "```\nsetup.py\n```"
		}
		args, _ := json.Marshal(map[string]string{"answer": answer})
		return policytest.Reply{ToolCalls: []schema.ToolCall{{ID: "c0", Type: "function",
			Function: schema.FunctionCall{Name: "finish", Arguments: string(args)}}}}
	})
	log := filepath.Join(t.TempDir(), "trainer.log")
	trainer := "echo {iteration} {sft} {init} {shards} >> " + log + " && mkdir -p {out} && touch {out}/adapter_config.json"
	args := []string{"iterate", "--run", "r", "--dataset", f.dataset, "--repos", f.repos, "--out", f.out,
		"--model", "base", "--base-url", f.a.URL, "--teacher", "teach", "--teacher-url", teacher.URL, "--teacher-tries", "3",
		"--samples", "2", "--iterations", "1", "--workers", "1", "--concurrency", "1", "--trainer", trainer}

	// Ctrl-C in the teacher's first try, then --resume: what finished is
	// not played again.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			mu.Lock()
			n := len(plays)
			mu.Unlock()
			if n >= 2 {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var out, errBuf bytes.Buffer
	if code := Run(ctx, nil, args, &out, &errBuf); code != exitInterrupted || !strings.Contains(errBuf.String(), "stopped in iteration 0, step rollout") {
		t.Fatalf("exit %d, want 130 naming the warm-up's rollout\n%s", code, errBuf.String())
	}
	code, stdout, errOut := run(t, append(args, "--resume")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	want := map[string]int{late: 2, never: 3}
	for _, in := range instances {
		if w := max(want[in.InstanceID], 1); plays[in.InstanceID] != w {
			t.Errorf("teacher played %s %d times, want %d", in.InstanceID, plays[in.InstanceID], w)
		}
	}
	if !strings.Contains(stdout, "iteration 0 (warm-up): teacher teach solved 4 of 6 instances in 3 tries") {
		t.Errorf("stdout does not report the warm-up:\n%s", stdout)
	}

	// The SFT shards hold the best trajectory of each solved instance,
	// every turn of weight 1; the unsolved instance has none.
	shards := filepath.Join(f.out, "warmup", "shards")
	rows := readShardRows(t, shards)
	if len(rows) == 0 {
		t.Fatalf("no SFT row in %s", shards)
	}
	got := map[string]bool{}
	for _, r := range rows {
		got[r.InstanceID] = true
		if r.Iteration != 0 || r.RunID != "r" {
			t.Errorf("row of %s: run %q iteration %d, want r, 0", r.InstanceID, r.RunID, r.Iteration)
		}
		wantSample := int64(0)
		if r.InstanceID == late {
			wantSample = 1 // solved in its second try
		}
		if r.Sample != wantSample {
			t.Errorf("row of %s is sample %d, want %d: try t plays sample t-1", r.InstanceID, r.Sample, wantSample)
		}
		for _, w := range r.Weights {
			if w != 1 {
				t.Errorf("row of %s: weight %g, want 1", r.InstanceID, w)
			}
		}
	}
	if len(got) != 4 || got[never] || got[noFunction] {
		t.Errorf("SFT rows of %v, want the 4 solved instances", got)
	}

	// Adapter 0 is trained on them with {sft} and no init adapter; iteration
	// 1 serves it and trains adapter 1 from it.
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	it0 := filepath.Join(f.out, "adapters", "it0")
	if len(lines) != 2 || lines[0] != "0 --sft "+shards || !strings.HasPrefix(lines[1], "1 --init-adapter "+it0+" ") {
		t.Errorf("trainer lines:\n%s\nwant iteration 0 with --sft on %s, then iteration 1 from %s", data, shards, it0)
	}
	if loads := f.a.Loads(); len(loads) != 1 || loads[0] != (policytest.Load{Op: "load", Name: "r-it0", Path: it0}) {
		t.Errorf("replica received %v, want adapter 0 loaded as r-it0", loads)
	}
	if n := f.a.Served()["r-it0"]; n < 2*6 {
		t.Errorf("%d requests with r-it0: iteration 1 did not roll out with adapter 0", n)
	}
}

// goldRow is a row of a2farm gold's output: an instance and its gold.
type goldRow struct {
	InstanceID       string `json:"instance_id"`
	ProblemStatement string `json:"problem_statement"`
	FileChanges      []struct {
		File    string `json:"file"`
		Changes struct {
			Entities []string `json:"edited_entities"`
		} `json:"changes"`
	} `json:"file_changes"`
}

func goldRows(t *testing.T, dataset, repos string) []goldRow {
	t.Helper()
	out := filepath.Join(t.TempDir(), "gt.jsonl")
	if code, _, errOut := run(t, "gold", "--dataset", dataset, "--repos", repos, "--out", out); code != 0 {
		t.Fatalf("gold: %s", errOut)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []goldRow
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r goldRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// answer is the finish answer naming exactly the gold: each file, and
// under it its edited entities (a method as Class.method names its class
// too).
func (g goldRow) answer() string {
	var b strings.Builder
	b.WriteString("```\n")
	for _, fc := range g.FileChanges {
		b.WriteString(fc.File + "\n")
		for _, e := range fc.Changes.Entities {
			_, name, _ := strings.Cut(e, ":")
			b.WriteString("function: " + name + "\n")
		}
		b.WriteString("\n")
	}
	return b.String() + "```"
}

// TestIterateAsyncRoundsPlayWhileAdaptersTrain: --max-staleness 1
// --round-size 2 plays the six instances in three rounds; each round's
// episodes are played by the adapter its report row names, within the
// bound; every new adapter is loaded on both replicas under its own name,
// and the command ends with the rows trained by staleness.
func TestIterateAsyncRoundsPlayWhileAdaptersTrain(t *testing.T) {
	f := newIterateFixture(t)
	trainer := "mkdir -p {out} && touch {out}/adapter_config.json && sleep 0.3"
	// Replica a restarts while round 3 plays with adapter 1: it forgets
	// every adapter, and the episodes that find r-it1 missing load it again.
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		for deadline := time.Now().Add(time.Minute); f.a.Served()["r-it1"] < 3; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				return
			}
		}
		f.a.Stop()
		f.a.Start(t)
	}()
	code, out, errOut := run(t, f.args(trainer, "--iterations", "1", "--max-staleness", "1", "--round-size", "2")...)
	<-restarted
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	reloaded := 0
	for _, l := range f.a.Loads() {
		if l == (policytest.Load{Op: "load", Name: "r-it1", Path: filepath.Join(f.out, "adapters", "it1")}) {
			reloaded++
		}
	}
	if reloaded < 2 {
		t.Errorf("replica a loaded r-it1 %d times: the restart did not happen while it played, or nothing loaded it again", reloaded)
	}
	if !strings.Contains(out, "3 rounds (1 passes of 3) done") || !strings.Contains(out, "rows trained by staleness (bound 1)") {
		t.Errorf("stdout:\n%s", out)
	}
	data, err := os.ReadFile(filepath.Join(f.out, "report.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []iterate.Row
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r iterate.Row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 3 {
		t.Fatalf("%d report rows, want 3", len(rows))
	}
	perModel := map[string]int{}
	for i, r := range rows {
		if r.Iteration != i+1 || r.Acting == nil || r.Staleness == nil || *r.Staleness > 1 || r.Rollout.Jobs != 4 || r.Rollout.Trajectories != 4 {
			t.Fatalf("row %d: %+v", i, r)
		}
		perModel[iterate.AdapterName("r", *r.Acting)] += r.Rollout.Jobs
	}
	for model, jobs := range perModel {
		if n := f.episodes(model); n < jobs { // each job's episode asks at least once, plus the confirmations
			t.Errorf("%s served %d requests, fewer than its %d jobs", model, n, jobs)
		}
	}
	for _, r := range []*policytest.Replica{f.a, f.b} {
		var loaded []string
		for _, l := range r.Loads() {
			if l.Op == "load" && !slices.Contains(loaded, l.Name) {
				loaded = append(loaded, l.Name)
			}
		}
		if want := []string{"r-it0", "r-it1", "r-it2", "r-it3"}; !slices.Equal(loaded, want) {
			t.Errorf("replica %s loaded %v, want %v", r.URL, loaded, want)
		}
	}
	if !strings.Contains(errOut, "round 2: rollout with r-it0 (2 rounds playing)") {
		t.Errorf("round 2 did not play beside round 1 with adapter 0:\n%s", errOut)
	}
	code, out, errOut = run(t, "status", "--iterate", f.out)
	if code != 0 || !strings.Contains(out, "3 rounds trained, newest adapter it3; playing: none") || !strings.Contains(out, "rows trained by staleness (bound 1)") {
		t.Errorf("status --iterate: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = run(t, "status", "--iterate", f.out, "--json")
	var loop iterate.LoopStatus
	if code != 0 || json.Unmarshal([]byte(out), &loop) != nil || loop.Trained != 3 || loop.Async.RowsTrained() == 0 {
		t.Errorf("status --iterate --json: exit %d, %+v\n%s", code, loop, out)
	}
	if code, _, errOut = run(t, "status", "--iterate", t.TempDir()); code != exitUsage || !strings.Contains(errOut, "no iterate run there") {
		t.Errorf("status --iterate on an empty folder: exit %d\n%s", code, errOut)
	}
}

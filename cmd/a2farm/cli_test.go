package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
)

func run(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"gold", "--nope"}, exitUsage, "unknown flag"},
		{"missing dataset", []string{"gold", "--repos", "."}, exitUsage, "--dataset"},
		{"missing repos folder", []string{"gold", "--dataset", "x.jsonl", "--repos", "/does/not/exist"}, exitUsage, "does not exist"},
		{"bad log format", []string{"--log-format", "xml", "version"}, exitUsage, "--log-format"},
		{"sample needs out", []string{"sample"}, exitUsage, "--out"},
		{"unknown dataset file", []string{"gold", "--dataset", "/does/not/exist.jsonl", "--repos", "."}, exitError, "no such file"},
		{"report needs a run", []string{"report"}, exitUsage, "one or more run folders"},
		{"report of no run", []string{"report", "/does/not/exist"}, exitUsage, "not a run folder"},
		{"status page address", []string{"status", "--http", "8090"}, exitUsage, "want HOST:PORT or :PORT"},
		{"version", []string{"version"}, exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

func TestSignalStopIsNotAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if code := exitCode(ctx, context.Canceled, new(bytes.Buffer)); code != exitOK {
		t.Errorf("exit code after a signal = %d, want 0", code)
	}
}

// TestSampleThenGold runs the demo pipeline through the command line:
// write the sample, extract its gold, compare it with itself and with a
// doctored reference.
func TestSampleThenGold(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sample")
	if code, out, errOut := run(t, "sample", "--out", dir); code != 0 || !strings.Contains(out, "6 instances") {
		t.Fatalf("sample: exit %d\n%s\n%s", code, out, errOut)
	}
	gt := filepath.Join(dir, "gt_location.jsonl")
	code, out, errOut := run(t, "gold", "-q", "--dataset", filepath.Join(dir, "dataset.jsonl"),
		"--repos", filepath.Join(dir, "repos"), "--out", gt, "--compare", gt)
	if code != 0 {
		t.Fatalf("gold: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "inventory/models.py:Warehouse.remove_item") || !strings.Contains(out, "6 match, 0 differ") {
		t.Errorf("gold output:\n%s", out)
	}
	if n := countLines(t, gt); n != 6 {
		t.Errorf("%s has %d rows, want 6", gt, n)
	}

	data, err := os.ReadFile(gt)
	if err != nil {
		t.Fatal(err)
	}
	doctored := filepath.Join(t.TempDir(), "ref.jsonl")
	bad := strings.Replace(string(data), `"edited_entities":["inventory/models.py:Warehouse.remove_item"]`, `"edited_entities":["inventory/models.py:Warehouse.add_item"]`, 1)
	if err := os.WriteFile(doctored, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "gold", "-q", "--dataset", filepath.Join(dir, "dataset.jsonl"),
		"--repos", filepath.Join(dir, "repos"), "--compare", doctored)
	if code != exitError || !strings.Contains(out, "DIFF acme__inventory-1 inventory/models.py edited_entities") || !strings.Contains(out, "5 match, 1 differ") {
		t.Errorf("compare with a doctored reference: exit %d\n%s", code, out)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// TestIndexAndToolCommands drives index graph, index build (twice, through
// a cache) and tool on the sample.
func TestIndexAndToolCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sample")
	if code, _, errOut := run(t, "sample", "--out", dir); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	snapshot := []string{"--repos", filepath.Join(dir, "repos"), "--repo", "acme/inventory", "--commit", "main"}

	code, out, errOut := run(t, append([]string{"index", "graph"}, snapshot...)...)
	if code != 0 || !strings.Contains(out, `{"src":"inventory/models.py:Warehouse.remove_item","dst":"inventory/errors.py:OutOfStock","type":"invokes"}`) {
		t.Errorf("index graph: exit %d, %s\n%.500s", code, errOut, out)
	}

	cache := filepath.Join(t.TempDir(), "cache")
	for i, want := range []string{"(built)", "(loaded from cache)"} {
		code, out, errOut = run(t, append([]string{"index", "build", "--cache", cache}, snapshot...)...)
		if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "52 nodes, 93 edges") {
			t.Errorf("index build #%d: exit %d, %s\n%s", i+1, code, errOut, out)
		}
	}

	code, out, errOut = run(t, append([]string{"tool", "--cache", cache, "--name", "search_commit", "--args", `{"query": "storage backends"}`}, snapshot...)...)
	if code != 0 || !strings.Contains(out, "] Add storage backends") || !strings.Contains(out, "Changes:") ||
		!strings.Contains(out, "files:    inventory/storage/__init__.py, inventory/storage/backends.py") {
		t.Errorf("tool search_commit: exit %d, %s\n%s", code, errOut, out)
	}
	for _, bad := range [][]string{{"--name", "nope"}, {"--name", "finish", "--args", "{oops"}, {"--name", "finish", "--search-engine", "lucene"}} {
		code, _, errOut = run(t, append(append([]string{"tool"}, bad...), snapshot...)...)
		if code == 0 {
			t.Errorf("tool %v succeeded: %s", bad, errOut)
		}
	}
}

func TestEvalCommand(t *testing.T) {
	dir := t.TempDir()
	gold := filepath.Join(dir, "gt.jsonl")
	preds := filepath.Join(dir, "preds.jsonl")
	os.WriteFile(gold, []byte(`{"instance_id":"o__r-1","repo":"o/r","file_changes":[{"file":"a.py","changes":{"edited_entities":["a.py:C.m"],"edited_modules":["a.py:C"]}}]}`+"\n"), 0o644)
	os.WriteFile(preds, []byte(`{"instance_id":"o__r-1","sample":0,"found_files":["a.py"],"found_modules":["a.py:C"],"found_entities":["a.py:C.m"],"raw_output":""}`+"\n"), 0o644)
	out := filepath.Join(dir, "eval.json")
	code, stdout, stderr := run(t, "eval", "--predictions", preds, "--gold", gold, "--json", out)
	if code != 0 || !strings.Contains(stdout, "recall@k") {
		t.Fatalf("eval: exit %d\n%s\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]float64
	if err := json.Unmarshal(data, &flat); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{"file.recall@k": 1, "file.precision@k": 0.2, "function.f1": 1, "module.acc@1": 1, "instances": 1, "samples": 1} {
		if flat[key] != want {
			t.Errorf("%s = %v, want %v", key, flat[key], want)
		}
	}
	if code, _, _ := run(t, "eval", "--predictions", preds); code != exitUsage {
		t.Errorf("missing --gold: exit %d", code)
	}
}

// TestLocalizeThenEval runs the heuristic agent over the sample and scores
// the predictions, through the command line.
func TestLocalizeThenEval(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sample")
	if code, _, errOut := run(t, "sample", "--out", dir); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	gt := filepath.Join(dir, "gt.jsonl")
	if code, _, errOut := run(t, "gold", "-q", "--dataset", filepath.Join(dir, "dataset.jsonl"), "--repos", filepath.Join(dir, "repos"), "--out", gt); code != 0 {
		t.Fatalf("gold: %s", errOut)
	}
	out := filepath.Join(t.TempDir(), "loc")
	code, stdout, errOut := run(t, "localize", "--dataset", filepath.Join(dir, "dataset.jsonl"), "--repos", filepath.Join(dir, "repos"),
		"--samples", "3", "--limit", "2", "--out", out)
	if code != 0 || !strings.Contains(stdout, "6 rollouts") {
		t.Fatalf("localize: exit %d\n%s\n%s", code, stdout, errOut)
	}
	if n := countLines(t, filepath.Join(out, "loc_outputs.jsonl")); n != 6 {
		t.Errorf("loc_outputs rows = %d, want 6", n)
	}
	entries, err := os.ReadDir(filepath.Join(out, "trajectories"))
	if err != nil || len(entries) != 2 {
		t.Errorf("trajectory files = %v, %v; want 2", entries, err)
	}
	code, stdout, _ = run(t, "eval", "--only-predicted", "--predictions", filepath.Join(out, "loc_outputs.jsonl"), "--gold", gt,
		"--trajectories", filepath.Join(out, "trajectories"))
	if code != 0 || !strings.Contains(stdout, "2 instances × 3 samples") || !strings.Contains(stdout, "type_b_rate") ||
		!strings.Contains(stdout, "tool_calls.search_code_snippets") {
		t.Errorf("eval: exit %d\n%s", code, stdout)
	}
	if code, _, _ := run(t, "localize", "--dataset", "x", "--repos", dir, "--out", out, "--policy", "oracle"); code != exitUsage {
		t.Errorf("unknown policy: exit %d", code)
	}
}

// TestLocalizeWithOpenAIServer drives --policy openai against a stand-in
// chat-completions server that answers at once.
func TestLocalizeWithOpenAIServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-local" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",`+
			`"function":{"name":"finish","arguments":"{\"answer\": \"`+"```\\\\ninventory/pricing.py\\\\nfunction: compute_discount\\\\n```"+`\"}"}}]}}],`+
			`"usage":{"prompt_tokens":50,"completion_tokens":5}}`)
	}))
	defer srv.Close()
	t.Setenv("MY_KEY", "sk-local")
	dir := filepath.Join(t.TempDir(), "sample")
	if code, _, errOut := run(t, "sample", "--out", dir); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	out := filepath.Join(t.TempDir(), "loc")
	code, stdout, errOut := run(t, "localize", "--dataset", filepath.Join(dir, "dataset.jsonl"), "--repos", filepath.Join(dir, "repos"),
		"--policy", "openai", "--base-url", srv.URL+"/v1", "--model", "m", "--api-key-env", "MY_KEY", "--limit", "1", "--out", out)
	if code != 0 || !strings.Contains(stdout, "map[ok:1]") {
		t.Fatalf("localize: exit %d\n%s\n%s", code, stdout, errOut)
	}
	data, err := os.ReadFile(filepath.Join(out, "loc_outputs.jsonl"))
	if err != nil || !strings.Contains(string(data), `"found_entities":["inventory/pricing.py:compute_discount"]`) {
		t.Errorf("loc_outputs: %s, %v", data, err)
	}
}

// TestReplayWritesShards labels archived trajectories and writes shards.
func TestReplayWritesShards(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sample")
	run(t, "sample", "--out", dir)
	gt := filepath.Join(dir, "gt.jsonl")
	run(t, "gold", "-q", "--dataset", filepath.Join(dir, "dataset.jsonl"), "--repos", filepath.Join(dir, "repos"), "--out", gt)
	loc := filepath.Join(t.TempDir(), "loc")
	if code, _, errOut := run(t, "localize", "--dataset", filepath.Join(dir, "dataset.jsonl"), "--repos", filepath.Join(dir, "repos"),
		"--samples", "4", "--out", loc); code != 0 {
		t.Fatalf("localize: %s", errOut)
	}
	shards := filepath.Join(t.TempDir(), "shards")
	labels := filepath.Join(t.TempDir(), "labels.jsonl")
	code, stdout, errOut := run(t, "replay", "--archive", filepath.Join(loc, "trajectories"), "--gold", gt, "--out", shards,
		"--labels", labels, "--sweep-H", "0,2", "--H", "1", "--gamma", "0.95")
	if code != 0 || !strings.Contains(stdout, "24 trajectories, 24 labelled") || !strings.Contains(stdout, "shard files") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, stdout, errOut)
	}
	data, err := os.ReadFile(filepath.Join(shards, "manifest.json"))
	if err != nil || !strings.Contains(string(data), `"Gamma": 0.95`) || !strings.Contains(string(data), `"H": 1`) {
		t.Errorf("manifest must record the hyperparameters: %s %v", data, err)
	}
	if n := countLines(t, labels); n < 24 {
		t.Errorf("labels file has %d lines", n)
	}
	if code, _, _ := run(t, "replay", "--archive", loc, "--gold", gt, "--out", shards, "--mode", "median"); code != exitUsage {
		t.Errorf("bad --mode: exit %d", code)
	}
	if code, stdout, _ := run(t, "replay", "--archive", filepath.Join(loc, "trajectories"), "--dataset", filepath.Join(dir, "dataset.jsonl"),
		"--repos", filepath.Join(dir, "repos"), "--out", filepath.Join(t.TempDir(), "sft"), "--sft"); code != 0 || !strings.Contains(stdout, "shard files") {
		t.Errorf("replay --sft: exit %d\n%s", code, stdout)
	}
	jsonl := filepath.Join(t.TempDir(), "shard.jsonl")
	if code, stdout, errOut := run(t, "export", "--in", filepath.Join(shards, "shard-00000.parquet"), "--out", jsonl); code != 0 || !strings.Contains(stdout, "rows written") {
		t.Fatalf("export shard: exit %d %s %s", code, stdout, errOut)
	}
	entries, _ := os.ReadDir(filepath.Join(loc, "trajectories"))
	code, stdout, _ = run(t, "export", "--in", filepath.Join(loc, "trajectories", entries[0].Name()), "--out", "-")
	first, _, _ := strings.Cut(stdout, "\n")
	var row map[string]any
	if code != 0 || json.Unmarshal([]byte(first), &row) != nil || row["job_id"] == nil || row["action_key"] == nil {
		t.Errorf("export trajectory: exit %d, first line %.200s", code, first)
	}
	if code, _, _ := run(t, "export", "--in", gt, "--out", "-"); code != exitError {
		t.Errorf("exporting a JSONL file: exit %d, want a clear failure", code)
	}
}

// TestUpMatchesReplay runs the whole farm in process (embedded NATS, two
// workers, the learner) on the sample, then checks that every job has one
// archived trajectory and that the learner's shards hold exactly what
// replay computes from the archive.
func TestUpMatchesReplay(t *testing.T) {
	policy := policytest.Scripted(t, 0)
	for _, tc := range []struct {
		name   string
		policy []string
	}{
		{"heuristic", nil},
		{"openai-protocol server", []string{"--policy", "openai", "--base-url", policy.URL + "/v1", "--model", "m"}},
		// Branches go through the whole farm: planned by up's coordinator
		// from the log, replayed by workers from the log, grouped by the
		// learner with their parents.
		{"heuristic with branches", []string{"--branches", "1", "--fork-at", "1,2"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testUpMatchesReplay(t, tc.policy) })
	}
}

func testUpMatchesReplay(t *testing.T, policy []string) {
	out := filepath.Join(t.TempDir(), "up")
	code, stdout, errOut := run(t, append([]string{"up", "--out", out, "--run", "e2e", "--samples", "3", "--workers", "3",
		"--concurrency", "2"}, policy...)...)
	if code != 0 || !strings.Contains(stdout, " trajectories archived") {
		t.Fatalf("up: exit %d\n%s\n%s", code, stdout, errOut)
	}
	page := filepath.Join(out, "report.html")
	if !strings.Contains(stdout, "report written: "+page) {
		t.Errorf("up did not print the report's path:\n%s", stdout)
	}
	if html, err := os.ReadFile(page); err != nil || !bytes.Contains(html, []byte(`<figure id="farm-rate">`)) {
		t.Errorf("up's report lacks the farm's figures (%v)", err)
	}
	archive := filepath.Join(out, "learner", "archive", "e2e", "0")
	trs, err := schema.ReadTrajectoryDir(filepath.Join(archive, "*"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	base := 0
	for _, tr := range trs {
		seen[tr.JobID]++
		if !tr.Fork.IsBranch() {
			base++
		}
	}
	branches := len(trs) - base
	if base != 18 || len(seen) != len(trs) || !strings.Contains(stdout, fmt.Sprintf("%d trajectories archived", len(trs))) {
		t.Errorf("%d distinct jobs archived of %d (%d base), want 18 base samples once each", len(seen), len(trs), base)
	}
	if wantBranches := slices.Contains(policy, "--branches"); wantBranches != (branches > 0) {
		t.Errorf("%d branches archived (asked for: %v)", branches, wantBranches)
	}
	if branches > 0 {
		checkBranchGroups(t, trs, filepath.Join(out, "learner", "shards", "e2e", "0", "*"))
	}
	// Replay the archive with the same (default) hyperparameters.
	gt := filepath.Join(t.TempDir(), "gt.jsonl")
	if code, _, errOut := run(t, "gold", "-q", "--dataset", filepath.Join(out, "sample", "dataset.jsonl"),
		"--repos", filepath.Join(out, "sample", "repos"), "--out", gt); code != 0 {
		t.Fatalf("gold: %s", errOut)
	}
	// The learner's archive tree as it is, picked by run and iteration.
	replayed := filepath.Join(t.TempDir(), "shards")
	if code, stdout, errOut := run(t, "replay", "--archive", filepath.Join(out, "learner", "archive"), "--run", "e2e", "--iteration", "0",
		"--gold", gt, "--out", replayed); code != 0 || !strings.Contains(stdout, fmt.Sprintf("%d trajectories of ", len(trs))) {
		t.Fatalf("replay: exit %d\n%s\n%s", code, stdout, errOut)
	}
	// A filter that matches nothing says what the archive holds.
	code, _, errOut = run(t, "replay", "--archive", filepath.Join(out, "learner"), "--run", "e2e", "--iteration", "1", "--gold", gt, "--out", t.TempDir())
	want := fmt.Sprintf("matches --run e2e --iteration 1; it holds run e2e: iteration 0 (%d trajectories, 6 instances)", len(trs))
	if code != exitError || !strings.Contains(errOut, want) {
		t.Errorf("replay of an iteration the archive lacks: exit %d, %q; want %q", code, errOut, want)
	}
	// The report of the up folder, numbers and all, from that folder alone.
	numbers := filepath.Join(t.TempDir(), "report.json")
	if code, stdout, errOut := run(t, "report", "--json", numbers, "--out", filepath.Join(t.TempDir(), "r.html"), out); code != 0 ||
		!strings.Contains(stdout, "report written: ") {
		t.Fatalf("report: exit %d\n%s\n%s", code, stdout, errOut)
	}
	var rep struct {
		Series []struct{ Trajectories int } `json:"series"`
	}
	if data, err := os.ReadFile(numbers); err != nil || json.Unmarshal(data, &rep) != nil || len(rep.Series) != 1 ||
		rep.Series[0].Trajectories != len(trs) {
		t.Errorf("report numbers: %+v (%v)", rep, err)
	}
	farmRows := readShardRows(t, filepath.Join(out, "learner", "shards", "e2e", "0", "*"))
	replayRows := readShardRows(t, replayed)
	if len(farmRows) == 0 || len(farmRows) != len(replayRows) {
		t.Fatalf("farm wrote %d rows, replay %d", len(farmRows), len(replayRows))
	}
	for id, row := range replayRows {
		got, ok := farmRows[id]
		if !ok || !reflect.DeepEqual(got.Weights, row.Weights) || !reflect.DeepEqual(got.Messages, row.Messages) {
			t.Errorf("shard row %s differs between the farm and replay", id)
		}
	}
}

// checkBranchGroups: every branch forks a parent that played to its end at
// a turn the parent lived past, with exactly its parent's first turns;
// each instance's shard manifest counts its branches and their own steps;
// and across the shards every turn is trained at most once — a branch's
// replayed turns never.
func checkBranchGroups(t *testing.T, trs []schema.Trajectory, shardsGlob string) {
	t.Helper()
	byJob := map[string]schema.Trajectory{}
	for _, tr := range trs {
		byJob[tr.JobID] = tr
	}
	branches, ownSteps := map[string]int{}, map[string]int{}
	for _, tr := range trs {
		if !tr.Fork.IsBranch() {
			continue
		}
		parent, ok := byJob[tr.Fork.ParentJobID]
		if !ok || parent.Status != schema.StatusOK && parent.Status != schema.StatusTruncated || tr.Fork.Turn >= int64(len(parent.Turns)) {
			t.Errorf("%s forks %s (%s, %d turns) at turn %d", tr.JobID, tr.Fork.ParentJobID, parent.Status, len(parent.Turns), tr.Fork.Turn)
			continue
		}
		for i := range tr.Fork.Turn {
			if !turnsEqual(tr.Turns[i], parent.Turns[i]) {
				t.Errorf("%s: replayed turn %d is not its parent's", tr.JobID, i)
			}
		}
		branches[tr.InstanceID]++
		ownSteps[tr.InstanceID] += len(tr.Turns) - tr.OwnTurns()
	}
	manifests, _ := filepath.Glob(filepath.Join(shardsGlob, "manifest.json"))
	for _, path := range manifests {
		var m struct {
			Params struct {
				Source      struct{ Instance string }
				Diagnostics learner.Diagnostics
			}
		}
		data, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(data, &m) != nil {
			t.Fatalf("manifest %s: %v", path, err)
		}
		inst, d := m.Params.Source.Instance, m.Params.Diagnostics.Branches
		if branches[inst] == 0 {
			continue
		}
		if d == nil || d.Branches != branches[inst] || d.BranchSteps != ownSteps[inst] {
			t.Errorf("%s: the shard manifest reports branches %+v; want %d branches, %d own steps", inst, d, branches[inst], ownSteps[inst])
		}
	}
	trained := map[string]int{}
	for _, row := range readShardRows(t, shardsGlob) {
		for a, turn := range row.Turns {
			if row.Weights[a] == 0 && (turn < row.FirstTurn || turn > row.LastTurn) {
				continue // context
			}
			trained[fmt.Sprintf("%s#%d", row.JobID, turn)]++
			if tr := byJob[row.JobID]; turn < tr.Fork.Turn {
				t.Errorf("%s: replayed turn %d is trained in the branch's row", row.JobID, turn)
			}
		}
	}
	for turn, n := range trained {
		if n != 1 {
			t.Errorf("turn %s is trained in %d rows", turn, n)
		}
	}
}

func readShardRows(t *testing.T, dirGlob string) map[string]schema.ShardRow {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dirGlob, "shard-*.parquet"))
	rows := map[string]schema.ShardRow{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		err = schema.ReadParquet(f, func(rec arrow.RecordBatch) error {
			rs, err := schema.ShardCodec().Decode(rec)
			for _, r := range rs {
				rows[fmt.Sprintf("%s@%d", r.JobID, r.FirstTurn)] = r
			}
			return err
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

// TestHyperparametersOnEveryLabellingCommand: learner, replay and up bind
// the same learnFlags, so every hyperparameter replay can sweep the
// learner service and up take too.
func TestHyperparametersOnEveryLabellingCommand(t *testing.T) {
	e := &env{stdout: io.Discard, stderr: io.Discard, languages: languages()}
	probe := &cobra.Command{Use: "probe"}
	var lf learnFlags
	lf.bind(probe, e)
	var names []string
	probe.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if len(names) < 16 {
		t.Fatalf("learnFlags binds %d flags: %v", len(names), names)
	}
	root := newRoot(e)
	for _, cmdName := range []string{"learner", "replay", "up", "report"} {
		cmd, _, err := root.Find([]string{cmdName})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if cmd.Flags().Lookup(n) == nil {
				t.Errorf("%s has no --%s", cmdName, n)
			}
		}
	}
}

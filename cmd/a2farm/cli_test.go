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
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/repoindex"
)

func run(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), nil, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestExitCodes runs every command with a representative bad input of
// each kind and checks the exit code of the contract (exit.go) and that
// the error is one line that names the bad thing.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	invalid := filepath.Join(dir, "invalid.jsonl") // every row invalid
	if err := os.WriteFile(invalid, []byte("{\"instance_id\": \"x\"}\nnot json\n[1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badJSON := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(badJSON, []byte("{\"instance_id\": nul}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noServer := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	iterate := func(extra ...string) []string {
		return append([]string{"iterate", "--run", "r", "--dataset", invalid, "--repos", dir, "--out", filepath.Join(dir, "it"),
			"--model", "m", "--base-url", "http://127.0.0.1:1/v1"}, extra...)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown command", []string{"locaize"}, exitUsage, `unknown command "locaize" for "a2farm"; did you mean "localize"?`},
		{"unknown subcommand", []string{"index", "buidl"}, exitUsage, `did you mean "build"?`},
		{"stray argument", []string{"gold", "extra"}, exitUsage, `unknown command "extra" for "a2farm gold"`},
		{"mistyped flag", []string{"localize", "--sampels", "4"}, exitUsage, "unknown flag --sampels; did you mean --samples?"},
		{"unknown flag", []string{"gold", "--nope"}, exitUsage, "unknown flag --nope"},
		{"not a number", []string{"localize", "--samples", "abc"}, exitUsage, `--samples "abc": want a whole number`},
		{"not a duration", []string{"worker", "--grace", "5"}, exitUsage, `--grace "5": want a duration`},
		{"flag without value", []string{"localize", "--samples"}, exitUsage, "--samples needs a value"},
		{"bad log format", []string{"--log-format", "xml", "version"}, exitUsage, "--log-format"},
		{"missing flag", []string{"gold", "--repos", "."}, exitUsage, "--dataset is required"},
		{"sample needs out", []string{"sample"}, exitUsage, "--out is required"},
		{"missing dataset file", []string{"gold", "--dataset", "/does/not/exist.jsonl", "--repos", "."}, exitUsage, "--dataset /does/not/exist.jsonl: no such file or folder"},
		{"missing repos folder", []string{"gold", "--dataset", invalid, "--repos", "/does/not/exist"}, exitUsage, "--repos /does/not/exist: no such file or folder"},
		{"gold of an invalid dataset", []string{"gold", "--dataset", invalid, "--repos", dir}, exitUsage, "all 3 rows are invalid"},
		{"localize of an invalid dataset", []string{"localize", "--dataset", invalid, "--repos", dir, "--out", filepath.Join(dir, "l")}, exitUsage, "all 3 rows are invalid"},
		{"up of an invalid dataset", []string{"up", "--dataset", invalid, "--repos", dir, "--out", filepath.Join(dir, "u")}, exitUsage, "all 3 rows are invalid"},
		{"iterate warm-up flags without a teacher", iterate("--teacher-tries", "3"), exitUsage, "--teacher-url and --teacher-tries configure the warm-up: give --teacher MODEL (or heuristic)"},
		{"iterate teacher and an adapter 0", iterate("--teacher", "heuristic", "--init-adapter", dir), exitUsage, "--teacher trains adapter 0 and --init-adapter gives it: pass one of them"},
		{"iterate heuristic teacher with a server", iterate("--teacher", "heuristic", "--teacher-url", "http://127.0.0.1:1/v1"), exitUsage, "--teacher heuristic is built in: it needs no --teacher-url"},
		{"strict on a bad row", []string{"localize", "--strict", "--dataset", invalid, "--repos", dir, "--out", filepath.Join(dir, "l")}, exitUsage, `line 1 (x): missing field "repo"`},
		{"missing predictions", []string{"eval", "--predictions", "/nope.jsonl", "--gold", invalid}, exitUsage, "--predictions /nope.jsonl: no such file or folder"},
		{"missing archive", []string{"replay", "--archive", "/nope", "--gold", invalid, "--out", dir}, exitUsage, "--archive /nope: no such file or folder"},
		{"predictions not JSON", []string{"eval", "--predictions", badJSON, "--gold", invalid}, exitError, "bad.jsonl: line 1: invalid JSON at column 20"},
		{"replay needs gold", []string{"replay", "--archive", dir, "--out", dir}, exitUsage, "--gold (or --dataset with --repos) is required"},
		{"missing export input", []string{"export", "--in", "/nope.arrow", "--out", "-"}, exitUsage, "--in /nope.arrow: no such file or folder"},
		{"missing coordinator dataset", []string{"coordinator", "--dataset", "/nope.jsonl", "--repos", dir, "--run", "r"}, exitUsage, "--dataset /nope.jsonl: no such file or folder"},
		{"missing worker repos", []string{"worker", "--repos", "/nope"}, exitUsage, "--repos /nope: no such file or folder"},
		{"missing index repos", []string{"index", "build", "--repos", "/nope", "--repo", "a/b", "--commit", "main"}, exitUsage, "--repos /nope: no such file or folder"},
		{"samples beyond the bound", []string{"localize", "--samples", "1000000000", "--dataset", invalid, "--repos", dir, "--out", dir}, exitUsage, "--samples 1000000000: want 1 to 10000"},
		{"up samples beyond the bound", []string{"up", "--samples", "1000000000", "--out", filepath.Join(dir, "u")}, exitUsage, "--samples 1000000000: want 1 to 10000"},
		{"coordinator samples beyond the bound", []string{"coordinator", "--samples", "0", "--dataset", invalid, "--repos", dir, "--run", "r"}, exitUsage, "--samples 0: want 1 to 10000"},
		{"zero concurrency", []string{"localize", "--concurrency", "0", "--dataset", invalid, "--repos", dir, "--out", dir}, exitUsage, "--concurrency 0: want 1 to 4096"},
		{"up zero concurrency", []string{"up", "--concurrency", "0", "--out", filepath.Join(dir, "u")}, exitUsage, "--concurrency 0: want 1 to 4096"},
		{"negative branches", []string{"localize", "--branches", "-1", "--dataset", invalid, "--repos", dir, "--out", dir}, exitUsage, "--branches -1: want 0 or more"},
		{"negative temperature", []string{"up", "--temperature", "-1", "--out", filepath.Join(dir, "u")}, exitUsage, "--temperature -1: want 0 or more"},
		{"fork-at without branches", []string{"up", "--fork-at", "1,2", "--out", filepath.Join(dir, "u")}, exitUsage, "--fork-at needs --branches N"},
		{"report needs a run", []string{"report"}, exitUsage, "one or more run folders"},
		{"report of no run", []string{"report", "/does/not/exist"}, exitUsage, "not a run folder"},
		{"status page address", []string{"status", "--http", "8090"}, exitUsage, "want HOST:PORT or :PORT"},
		{"status without a server", []string{"status", "--nats", noServer}, exitError, "start a server with `a2farm nats`"},
		{"worker without a server", []string{"worker", "--repos", dir, "--nats", noServer}, exitError, "or point --nats (env A2FARM_NATS) at yours"},
		{"version", []string{"version"}, exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tt.code, tt.want)
			}
			if code != exitOK && strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("the error is not one line:\n%s", stderr)
			}
			for _, internal := range []string{"strconv.", "map[", "json: cannot", "invalid character"} {
				if strings.Contains(stderr, internal) {
					t.Errorf("Go internals (%s) reach the user: %s", internal, stderr)
				}
			}
		})
	}
	// A command that fails before it starts leaves nothing behind.
	for _, left := range []string{"u", "l"} {
		if _, err := os.Stat(filepath.Join(dir, left)); err == nil {
			t.Errorf("%s was left behind by a command that failed before it started", left)
		}
	}
}

func TestAStoppedServiceExitsZeroAnInterruptedBatch130(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	root := newRoot(&env{stdout: io.Discard, stderr: io.Discard, languages: languages()})
	for _, tc := range []struct {
		command []string
		err     error
		code    int
	}{
		{[]string{"worker"}, context.Canceled, exitOK},
		{[]string{"learner"}, context.Canceled, exitOK},
		{[]string{"nats"}, context.Canceled, exitOK},
		{[]string{"localize"}, &interruptedError{"3 of 8 samples written"}, exitInterrupted},
		{[]string{"gold"}, fmt.Errorf("extract: %w", context.Canceled), exitInterrupted},
		{[]string{"up"}, nil, exitOK}, // finished before the signal mattered
	} {
		cmd, _, err := root.Find(tc.command)
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		if code := exitCode(ctx, cmd, tc.err, &stderr); code != tc.code {
			t.Errorf("%s after a signal with %v: exit %d, want %d", tc.command[0], tc.err, code, tc.code)
		}
		if lines := strings.Count(stderr.String(), "\n"); lines > 1 {
			t.Errorf("%s: %d lines: %q", tc.command[0], lines, stderr.String())
		}
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

// TestACachedIndexReadsNoGitObject checks the path index build and tool
// share: a snapshot built into the cache and named by its full id, or by
// an abbreviated one, opens without reading one git object (on ansible,
// reading one — the commit, for the unread-languages note — loaded the pack
// index: a cached tool call went from 0.09 s and 120 MB to 0.43 s and
// 239 MB). A build still reads the snapshot, and says what its languages
// leave unread.
func TestACachedIndexReadsNoGitObject(t *testing.T) {
	reposDir, commit := sampleSnapshot(t)
	var logged bytes.Buffer
	e := &env{stdout: io.Discard, stderr: io.Discard, languages: languages(), languageRule: "go",
		log: zerolog.New(&logged)}
	cf := cacheFlags{dir: filepath.Join(t.TempDir(), "cache"), engine: repoindex.DefaultEngine}
	for i, want := range []struct {
		rev                     string
		cached, readsGit, notes bool
	}{{commit, false, true, true}, {commit, true, false, false}, {commit[:8], true, false, false}} {
		logged.Reset()
		sf := snapshotFlags{repos: reposDir, repo: "acme/inventory", commit: want.rev}
		repos := gitrepo.NewSet(reposDir)
		idx, err := buildIndex(context.Background(), e, repos, sf, cf)
		if err != nil {
			t.Fatalf("build #%d: %v", i+1, err)
		}
		read := repos.ObjectsRead()
		idx.Close()
		repos.Close()
		notes := strings.Contains(logged.String(), "left unread")
		if idx.Cached != want.cached || (read > 0) != want.readsGit || notes != want.notes {
			t.Errorf("build #%d: cached %v, %d git objects read, unread note %v; want cached %v, objects read %v, note %v\n%s",
				i+1, idx.Cached, read, notes, want.cached, want.readsGit, want.notes, logged.String())
		}
	}
}

// sampleSnapshot writes the built-in sample and returns its repos folder
// and the full id of acme/inventory's main.
func sampleSnapshot(t testing.TB) (reposDir, commit string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sample")
	if code, _, errOut := run(t, "sample", "--out", dir); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	reposDir = filepath.Join(dir, "repos")
	r, err := gitrepo.Open(filepath.Join(reposDir, "acme__inventory"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if commit, err = r.Resolve("main"); err != nil {
		t.Fatal(err)
	}
	return reposDir, commit
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
	if code != 0 || !strings.Contains(stdout, ": 1 ok\n") {
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

// TestLocalizeSaysWhenNoRolloutPlayedOut: against a policy server that
// never answers, localize logs the first failure as it happens, prints
// the outcomes in words and exits 1 once the outage budget is spent.
func TestLocalizeSaysWhenNoRolloutPlayedOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sample")
	if code, _, errOut := run(t, "sample", "--out", dir); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	nothing := fmt.Sprintf("http://127.0.0.1:%d/v1", freePort(t))
	code, stdout, stderr := run(t, "localize", "--dataset", filepath.Join(dir, "dataset.jsonl"), "--repos", filepath.Join(dir, "repos"),
		"--policy", "openai", "--model", "m", "--base-url", nothing, "--policy-outage-budget", "1s", "--limit", "2", "--samples", "2",
		"--out", filepath.Join(t.TempDir(), "loc"))
	if code != exitError {
		t.Errorf("exit %d, want %d\n%s\n%s", code, exitError, stdout, stderr)
	}
	if !strings.Contains(stdout, "over 2 instances: 4 infra_error") {
		t.Errorf("outcomes not in words:\n%s", stdout)
	}
	if n := strings.Count(stderr, "first infra_error"); n != 1 {
		t.Errorf("the first failure logged %d times, want once:\n%s", n, stderr)
	}
	last := stderr[strings.LastIndex(strings.TrimSpace(stderr), "\n")+1:]
	if !strings.HasPrefix(last, "a2farm: no rollout played to its end (4 infra_error); the first: infra_error: no server of model \"m\" answered") {
		t.Errorf("last line %q", last)
	}
}

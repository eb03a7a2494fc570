package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/a2farm/a2farm/internal/needs"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
)

const onPolicySeed = 42

// onPolicyScript is a policy server that exercises everything the record
// must keep, keyed by the turn the seed names: a native multi-call turn
// with reasoning and odd argument spacing, a plain-text turn (the agent
// answers "keep going"), a turn whose reported prompt size forces the
// next request to be trimmed, and a finish; or the same in text mode.
// It answers with token ids of a toy chat template that strips reasoning
// from history in native mode (which breaks the token prefix there).
type onPolicyScript struct {
	textMode bool
	template policytest.Template
	mu       sync.Mutex
	replies  map[int64]policytest.Reply // by seed
}

func (s *onPolicyScript) reply(req policytest.Request) policytest.Reply {
	turn := (*req.Seed - schema.SampleSeed(onPolicySeed, 0)) % 1009
	call := func(id, name, args string) schema.ToolCall {
		return schema.ToolCall{ID: id, Type: "function", Function: schema.FunctionCall{Name: name, Arguments: args}}
	}
	var r policytest.Reply
	switch {
	case s.textMode && turn == 0:
		// the stop word ends the reply before the closing tag
		r = policytest.Reply{Content: "Searching.\n<function=search_code_snippets>\n<parameter=search_terms>['Warehouse']</parameter>\n", FinishReason: "stop"}
	case s.textMode && turn == 1:
		r = policytest.Reply{Content: "Let me think about what I saw.", FinishReason: "stop"}
	case s.textMode && turn == 2:
		r = policytest.Reply{Content: "<function=get_entity_contents>\n<parameter=entity_names>['inventory/models.py:Warehouse']</parameter>\n", FinishReason: "stop"}
	case s.textMode && turn == 3:
		r = policytest.Reply{Content: "<function=search_code_snippets>\n<parameter=search_terms>['remove_item']</parameter>\n", FinishReason: "stop", PromptTokens: 1_000_000}
	case s.textMode:
		r = policytest.Reply{Content: "<function=finish>\n<parameter=answer>inventory/models.py</parameter>\n", FinishReason: "stop"}
	case turn == 0:
		r = policytest.Reply{Reasoning: "Two searches at once.", FinishReason: "tool_calls", ToolCalls: []schema.ToolCall{
			call("chatcmpl-tool-9f1", "search_code_snippets", `{"search_terms":  ["Warehouse"] }`),
			call("chatcmpl-tool-9f2", "get_entity_contents", `{"entity_names": ["inventory/models.py:Warehouse"]}`)}}
	case turn == 1:
		r = policytest.Reply{Content: "Hmm, <not sure> what to look at next & why.", FinishReason: "stop"}
	case turn == 2:
		r = policytest.Reply{Content: "Up the tree.", FinishReason: "tool_calls", PromptTokens: 1_000_000, ToolCalls: []schema.ToolCall{
			call("chatcmpl-tool-a3", "explore_tree_structure", `{"start_entities": ["inventory/models.py:Warehouse"]}`)}}
	case turn == 3:
		r = policytest.Reply{FinishReason: "tool_calls", ToolCalls: []schema.ToolCall{
			call("chatcmpl-tool-b4", "search_code_snippets", `{"search_terms": ["remove_item"]}`)}}
	default:
		r = policytest.Reply{FinishReason: "tool_calls", ToolCalls: []schema.ToolCall{
			call("chatcmpl-tool-c5", "finish", `{"answer": "inventory/models.py"}`)}}
	}
	r.PromptTokenIDs = s.template.Prompt(req.Messages)
	r.CompletionTokenID = s.template.Completion(r)
	if req.Logprobs {
		r.Logprobs = make([]float32, len(r.CompletionTokenID))
		for i := range r.Logprobs {
			r.Logprobs[i] = -float32(i%7+1) / 8
		}
	}
	s.mu.Lock()
	s.replies[*req.Seed] = r
	s.mu.Unlock()
	return r
}

// TestShardsAreWhatThePolicySaw rolls out against a recording server and
// checks the shards against what it received and returned: before every
// trained assistant message of a message shard row lie exactly the
// messages of the request that produced it, byte for byte as JSON; token
// rows hold exactly the served ids, weights sit exactly on completion
// tokens, and turns merge exactly when the served prompt extends the
// sequence.
func TestShardsAreWhatThePolicySaw(t *testing.T) {
	for _, tc := range []struct {
		textMode bool
		extra    []string
	}{{}, {textMode: true}, {extra: []string{"--logprobs"}}} {
		t.Run(fmt.Sprintf("text mode %v %v", tc.textMode, tc.extra), func(t *testing.T) {
			s := rollOutOnPolicy(t, tc.textMode, tc.extra)
			checkMessageRows(t, s.rows, s.requests)
			checkTokenRows(t, s.tokens, s.rows, s.script.replies, len(s.requests))
			checkManifest(t, s)
		})
	}
}

// checkManifest: the manifest reports the token sequences, and export
// prints token shards like any other.
func checkManifest(t *testing.T, s onPolicyShards) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m shard.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	tokens, weighted := 0, 0
	for _, r := range s.tokens {
		tokens += len(r.InputIDs)
	}
	for _, r := range s.script.replies {
		weighted += len(r.CompletionTokenID)
	}
	st := m.Tokens
	if m.TokenRows != len(s.tokens) || st.Sequences != len(s.tokens) || st.Tokens != tokens || st.WeightedTokens != weighted ||
		st.TurnsWithIDs != len(s.requests) || st.Merged != len(s.requests)-len(s.tokens) || m.TokenNote != "" ||
		st.MergeRate != float64(st.Merged)/float64(st.Mergeable) {
		t.Errorf("manifest token stats %+v (%d rows), want %d sequences of %d tokens, %d weighted", st, m.TokenRows, len(s.tokens), tokens, weighted)
	}
	code, out, errOut := run(t, "export", "--in", filepath.Join(s.dir, m.TokenFiles[0].Name), "--out", "-")
	first, _, _ := strings.Cut(out, "\n")
	var row map[string]any
	if code != 0 || json.Unmarshal([]byte(first), &row) != nil || row["input_ids"] == nil || row["loss_weights"] == nil {
		t.Errorf("export of a token shard: exit %d, first line %.200s %s", code, first, errOut)
	}
}

// TestReplayNamesAVersionItCannotRead: an archive written by an earlier
// format (version 2, before the request record) is refused by name.
func TestReplayNamesAVersionItCannotRead(t *testing.T) {
	code, _, errOut := run(t, "replay", "--archive", filepath.Join("testdata", "archive-v2"), "--gold", "unused.jsonl",
		"--out", t.TempDir())
	if code != exitError || !strings.Contains(errOut, "format version 2; this build reads versions 4 to "+schema.Version) {
		t.Errorf("replay of a version-2 archive: exit %d: %s", code, errOut)
	}
}

// onPolicyShards are shards written by replay from a localize run against
// a recording server, with what the server received.
type onPolicyShards struct {
	dir      string
	script   *onPolicyScript
	requests map[int64][]byte // seed → the request's messages as received
	tools    map[int64][]byte // seed → the request's tools as received
	archive  string           // the trajectories folder
	gold     string           // the gold file
	rows     []schema.ShardRow
	tokens   []schema.TokenRow
}

// rollOutOnPolicy plays 3 samples of one instance against the script,
// with extra localize flags (branches), and replays them into shards.
func rollOutOnPolicy(t *testing.T, textMode bool, extra []string) onPolicyShards {
	t.Helper()
	script := &onPolicyScript{textMode: textMode, template: policytest.Template{StripReasoning: !textMode},
		replies: map[int64]policytest.Reply{}}
	srv := policytest.NewRecorder(t, script.reply)
	dir := t.TempDir()
	if code, _, errOut := run(t, "sample", "--out", filepath.Join(dir, "sample")); code != 0 {
		t.Fatal(errOut)
	}
	ds, repos := filepath.Join(dir, "sample", "dataset.jsonl"), filepath.Join(dir, "sample", "repos")
	// One instance: seeds are per sample, so they name a request.
	args := []string{"localize", "--dataset", ds, "--repos", repos, "--limit", "1", "--samples", "3",
		"--policy", "openai", "--model", "m", "--base-url", srv.URL, "--seed", fmt.Sprint(onPolicySeed),
		"--return-token-ids", "--out", filepath.Join(dir, "loc")}
	args = append(args, extra...)
	if textMode {
		args = append(args, "--text-mode")
	}
	if code, _, errOut := run(t, args...); code != 0 {
		t.Fatalf("localize: %s", errOut)
	}
	gt := filepath.Join(dir, "gt.jsonl")
	if code, _, errOut := run(t, "gold", "-q", "--dataset", ds, "--repos", repos, "--out", gt); code != 0 {
		t.Fatal(errOut)
	}
	shards := filepath.Join(dir, "shards")
	code, stdout, errOut := run(t, "replay", "--archive", filepath.Join(dir, "loc", "trajectories"), "--gold", gt,
		"--keep-unsuccessful", "--out", shards)
	if code != 0 || !strings.Contains(stdout, "token shards: 1 files") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, stdout, errOut)
	}
	requests, tools := map[int64][]byte{}, map[int64][]byte{}
	for _, body := range srv.Bodies() {
		var b struct {
			Seed     int64           `json:"seed"`
			Messages json.RawMessage `json:"messages"`
			Tools    json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		requests[b.Seed], tools[b.Seed] = b.Messages, b.Tools
	}
	return onPolicyShards{dir: shards, script: script, requests: requests, tools: tools, archive: filepath.Join(dir, "loc", "trajectories"), gold: gt,
		rows:   readParquetDir(t, shards, "shard-", schema.ShardCodec().Decode),
		tokens: readParquetDir(t, shards, "tokens-", schema.TokenCodec().Decode)}
}

// turnSeed is the seed the request of a sample's turn carried.
func turnSeed(sample, turn int64) int64 { return schema.SampleSeed(onPolicySeed, sample) + turn }

func checkMessageRows(t *testing.T, rows []schema.ShardRow, requests map[int64][]byte) {
	t.Helper()
	trained := map[int64]int{} // seed → rows training it
	split := false
	for _, row := range rows {
		split = split || row.FirstTurn > 0
		if len(row.Turns) != len(row.Weights) || len(row.Turns) != len(row.Advantages) {
			t.Fatalf("%s: %d turns, %d weights, %d advantages", row.JobID, len(row.Turns), len(row.Weights), len(row.Advantages))
		}
		a := 0 // assistant message number
		for i, m := range row.Messages {
			if m.Role != "assistant" {
				continue
			}
			turn := row.Turns[a]
			isTrained := turn >= row.FirstTurn && turn <= row.LastTurn
			if !isTrained && row.Weights[a] != 0 {
				t.Errorf("%s: context message of turn %d has weight %g", row.JobID, turn, row.Weights[a])
			}
			a++
			if !isTrained {
				continue
			}
			seed := turnSeed(row.Sample, turn)
			trained[seed]++
			prefix, _ := json.Marshal(row.Messages[:i])
			if !bytes.Equal(prefix, requests[seed]) {
				t.Errorf("%s turn %d: the messages before it differ from its request\n shard %s\n  sent %s", row.JobID, turn, prefix, requests[seed])
			}
		}
		if last := row.Messages[len(row.Messages)-1]; last.Role != "assistant" {
			t.Errorf("%s: row ends with a %s message", row.JobID, last.Role)
		}
	}
	for seed := range requests {
		if trained[seed] != 1 {
			t.Errorf("the turn of seed %d is trained in %d rows, want 1", seed, trained[seed])
		}
	}
	if !split {
		t.Error("no row starts after turn 0: the trim did not split a conversation")
	}
}

// checkTokenLogprobs: a token row holds the served log-probability of each
// completion id and NaN on every other id when the server returned them,
// and no column at all when it did not.
func checkTokenLogprobs(t *testing.T, tok schema.TokenRow, replies map[int64]policytest.Reply, served func(sample, turn int64) ([]int32, []int32)) {
	t.Helper()
	if replies[turnSeed(tok.Sample, tok.FirstTurn)].Logprobs == nil {
		if tok.Logprobs != nil {
			t.Errorf("%s: log-probabilities without the server returning any", tok.JobID)
		}
		return
	}
	if len(tok.Logprobs) != len(tok.InputIDs) {
		t.Fatalf("%s: %d log-probabilities for %d ids", tok.JobID, len(tok.Logprobs), len(tok.InputIDs))
	}
	want := make([]float32, len(tok.InputIDs))
	for i := range want {
		want[i] = float32(math.NaN())
	}
	for turn := tok.FirstTurn; turn <= tok.LastTurn; turn++ {
		prompt, _ := served(tok.Sample, turn)
		copy(want[len(prompt):], replies[turnSeed(tok.Sample, turn)].Logprobs)
	}
	for i, lp := range tok.Logprobs {
		if lp != want[i] && !(math.IsNaN(float64(lp)) && math.IsNaN(float64(want[i]))) {
			t.Errorf("%s: id %d has log-probability %g, want %g", tok.JobID, i, lp, want[i])
			return
		}
	}
}

func checkTokenRows(t *testing.T, tokens []schema.TokenRow, rows []schema.ShardRow, replies map[int64]policytest.Reply, turns int) {
	t.Helper()
	weight := map[int64]float32{}
	for _, row := range rows {
		for a, turn := range row.Turns {
			if turn >= row.FirstTurn && turn <= row.LastTurn {
				weight[turnSeed(row.Sample, turn)] = float32(row.Weights[a])
			}
		}
	}
	served := func(sample, turn int64) (prompt, full []int32) {
		r := replies[turnSeed(sample, turn)]
		return r.PromptTokenIDs, append(slices.Clone(r.PromptTokenIDs), r.CompletionTokenID...)
	}
	covered, merges := 0, 0
	for _, tok := range tokens {
		_, full := served(tok.Sample, tok.LastTurn)
		if !slices.Equal(tok.InputIDs, full) {
			t.Errorf("%s turns %d-%d: input ids are not the last turn's served prompt and completion", tok.JobID, tok.FirstTurn, tok.LastTurn)
			continue
		}
		want := make([]float32, len(full))
		for turn := tok.FirstTurn; turn <= tok.LastTurn; turn++ {
			prompt, end := served(tok.Sample, turn)
			for p := len(prompt); p < len(end); p++ {
				want[p] = weight[turnSeed(tok.Sample, turn)]
			}
			if turn > tok.FirstTurn {
				merges++
				if _, prev := served(tok.Sample, turn-1); !slices.Equal(prompt[:min(len(prev), len(prompt))], prev) {
					t.Errorf("%s: turn %d merged although its prompt does not extend turn %d", tok.JobID, turn, turn-1)
				}
			} else if _, servedBefore := replies[turnSeed(tok.Sample, turn-1)]; turn > 0 && servedBefore {
				// (a branch's fork turn starts its sequence: the turns
				// before it were its parent's, not served to it)
				if _, prev := served(tok.Sample, turn-1); len(prompt) >= len(prev) && slices.Equal(prompt[:len(prev)], prev) {
					t.Errorf("%s: turn %d starts a sequence although its prompt extends turn %d", tok.JobID, turn, turn-1)
				}
			}
			covered++
		}
		if !slices.Equal(tok.LossWeights, want) {
			t.Errorf("%s turns %d-%d: loss weights are not exactly the turns' weights on their completion ids", tok.JobID, tok.FirstTurn, tok.LastTurn)
		}
		checkTokenLogprobs(t, tok, replies, served)
	}
	if covered != turns || merges == 0 || len(tokens) == len(rows) && merges == 0 {
		t.Errorf("token rows cover %d of %d turns with %d merges", covered, turns, merges)
	}
}

func readParquetDir[T any](t *testing.T, dir, prefix string, decode func(arrow.RecordBatch) ([]T, error)) []T {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, prefix+"*.parquet"))
	var out []T
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		err = schema.ReadParquet(f, func(rec arrow.RecordBatch) error {
			rows, err := decode(rec)
			out = append(out, rows...)
			return err
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s rows in %s", prefix, dir)
	}
	return out
}

// duckDBReader is DuckDB's Node package, installed from the npm registry
// into the user's cache on first use.
const duckDBPackage = "@duckdb/node-api@1.5.6-r.1"

const duckDBScript = `
import { DuckDBInstance } from '@duckdb/node-api';
const db = await (await DuckDBInstance.create(':memory:')).connect();
const [kind, ...files] = process.argv.slice(2);
const list = '[' + files.map(f => "'" + f.replaceAll("'", "''") + "'").join(',') + ']';
const sql = kind === 'messages'
  ? 'SELECT job_id, CAST(first_turn AS INTEGER) AS first_turn, to_json(messages) AS messages, to_json(tools) AS tools, to_json(turns) AS turns, to_json(weights) AS weights FROM read_parquet(' + list + ')'
  : 'SELECT job_id, CAST(first_turn AS INTEGER) AS first_turn, to_json(input_ids) AS input_ids, to_json(loss_weights) AS loss_weights FROM read_parquet(' + list + ')';
const res = await db.runAndReadAll(sql);
for (const row of res.getRowObjectsJson()) console.log(JSON.stringify(row));
`

// TestShardsReadByDuckDB reads message and token shards with DuckDB, an
// independent Parquet reader (not arrow-go), as users of pyarrow or
// datasets would, and checks it sees what a2farm wrote.
func TestShardsReadByDuckDB(t *testing.T) {
	dir, node := needs.NPMPackage(t, duckDBPackage)
	script := filepath.Join(dir, "read-shards.mjs")
	if err := os.WriteFile(script, []byte(duckDBScript), 0o644); err != nil {
		t.Fatal(err)
	}
	s := rollOutOnPolicy(t, false, nil)
	query := func(kind, prefix string) []map[string]any {
		files, _ := filepath.Glob(filepath.Join(s.dir, prefix+"*.parquet"))
		out, err := exec.Command(node, append([]string{script, kind}, files...)...).Output()
		if err != nil {
			t.Fatalf("duckdb %s: %v", kind, err)
		}
		var rows []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var row map[string]any
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("duckdb output %q: %v", line, err)
			}
			rows = append(rows, row)
		}
		return rows
	}
	key := func(job any, first any) string { return fmt.Sprintf("%v@%v", job, first) }
	want := map[string]schema.ShardRow{}
	for _, r := range s.rows {
		want[key(r.JobID, r.FirstTurn)] = r
	}
	got := query("messages", "shard-")
	if len(got) != len(s.rows) {
		t.Fatalf("DuckDB read %d message rows, a2farm wrote %d", len(got), len(s.rows))
	}
	for _, g := range got {
		w, ok := want[key(g["job_id"], g["first_turn"])]
		if !ok {
			t.Fatalf("DuckDB row %v/%v was not written", g["job_id"], g["first_turn"])
		}
		var msgs []schema.Message
		var tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name, Description, Parameters string
			} `json:"function"`
		}
		var turns []int64
		var weights []float64
		for field, v := range map[string]any{"messages": &msgs, "tools": &tools, "turns": &turns, "weights": &weights} {
			if err := json.Unmarshal([]byte(g[field].(string)), v); err != nil {
				t.Fatalf("%s: %v", field, err)
			}
		}
		if !reflect.DeepEqual(msgs, w.Messages) || !slices.Equal(turns, w.Turns) || !slices.Equal(weights, w.Weights) {
			t.Errorf("%s: DuckDB sees another conversation or weights", w.JobID)
		}
		if len(tools) != len(w.Tools) || tools[0].Function.Name != w.Tools[0].Function.Name ||
			tools[0].Function.Parameters != string(w.Tools[0].Function.Parameters) {
			t.Errorf("%s: DuckDB sees other tools", w.JobID)
		}
	}
	wantTok := map[string]schema.TokenRow{}
	for _, r := range s.tokens {
		wantTok[key(r.JobID, r.FirstTurn)] = r
	}
	gotTok := query("tokens", "tokens-")
	if len(gotTok) != len(s.tokens) {
		t.Fatalf("DuckDB read %d token rows, a2farm wrote %d", len(gotTok), len(s.tokens))
	}
	for _, g := range gotTok {
		w := wantTok[key(g["job_id"], g["first_turn"])]
		var ids []int32
		var weights []float32
		if json.Unmarshal([]byte(g["input_ids"].(string)), &ids) != nil || json.Unmarshal([]byte(g["loss_weights"].(string)), &weights) != nil {
			t.Fatalf("token row %v: undecodable lists", g["job_id"])
		}
		if !slices.Equal(ids, w.InputIDs) || !slices.Equal(weights, w.LossWeights) {
			t.Errorf("%s: DuckDB sees other token ids or weights", w.JobID)
		}
	}
}

package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/a2farm/a2farm/internal/golden"
)

// TestSchemasGolden pins every contract's Arrow schema: changing a type
// fails here until the golden file is updated on purpose.
func TestSchemasGolden(t *testing.T) {
	var b strings.Builder
	for _, s := range []*arrow.Schema{
		InstanceCodec().Schema(),
		GoldCodec().Schema(),
		JobCodec().Schema(),
		TrajectorySchema(),
		ShardCodec().Schema(),
		TokenCodec().Schema(),
	} {
		kind, _ := s.Metadata().GetValue(MetaKind)
		b.WriteString("== " + kind + "\n" + s.String() + "\n\n")
	}
	golden.Check(t, "schemas.golden", []byte(b.String()))
}

func TestJobJSONGolden(t *testing.T) {
	out, err := json.MarshalIndent(sampleJob(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "job.golden.json", append(out, '\n'))
}

func sampleJob() Job {
	return Job{
		JobID:            JobID("run-1", 0, "psf__requests-1142", 3),
		RunID:            "run-1",
		Iteration:        0,
		InstanceID:       "psf__requests-1142",
		Repo:             "psf/requests",
		BaseCommit:       "22623bd8c265b78b161542663ee980738441c307",
		ProblemStatement: "requests.get is ALWAYS sending content length",
		Sample:           3,
		Policy:           Policy{Kind: "openai", Model: "qwen3-8b-lora-iter1", Version: "iter1", TextMode: true, ReturnTokenIDs: true},
		Sampling:         Sampling{Temperature: 1, TopP: 0.8, TopK: 20, RepetitionPenalty: 1.05, MaxTokens: 4096, Seed: SampleSeed(42, 3)},
		Limits:           Limits{MaxToolCalls: 20, MaxContextTokens: 40000, WallTimeSeconds: 600},
		Tools:            []string{"finish", "search_code_snippets", "get_entity_contents", "explore_tree_structure"},
		Attempt:          1,
	}
}

func at(sec int) time.Time { return time.Date(2026, 12, 2, 10, 0, sec, 123456000, time.UTC) }

func sampleTrajectories() []Trajectory {
	return []Trajectory{
		{
			JobID: "r/0/a__b-1/0", RunID: "r", InstanceID: "a__b-1", Repo: "a/b", Sample: 0,
			Status: StatusOK, FinalAnswer: "```\npkg/x.py\nfunction: f\n```",
			Predictions: Locations{Files: []string{"pkg/x.py"}, Modules: []string{"pkg/x.py:f"}, Entities: []string{"pkg/x.py:f"}},
			StartedAt:   at(0), FinishedAt: at(7), PromptTokens: 1200, CompletionTokens: 80,
			Policy:   Policy{Kind: "openai", Model: "m", Endpoint: "http://gpu-1:8000/v1", Version: "v1"},
			Sampling: Sampling{Temperature: 1, TopP: 0.8, Seed: 7}, WorkerID: "w-1",
			ToolsJSON: `[{"type":"function"}]`,
			Turns: []Turn{
				{
					Index: 0, RequestAdded: []Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "task"}},
					AssistantContent: "look", Reasoning: "think", FinishReason: "tool_calls",
					ToolCalls: []ToolCall{{ID: "chatcmpl-tool-1", Type: "function", Function: FunctionCall{Name: "search_code_snippets", Arguments: `{"search_terms": ["f"]}`}}},
					ToolName:  "search_code_snippets",
					ToolArgs:  `{"search_terms":["f"]}`, ActionKey: `search_code_snippets{"search_terms":["f"]}`,
					Observation: "OBSERVATION:\nFound function `pkg/x.py:f`.", ObservationChars: 41,
					Surfaced:       Locations{Files: []string{"pkg/x.py"}, Modules: []string{}, Entities: []string{"pkg/x.py:f"}},
					PromptTokenIDs: []int32{9, 8, 7, 6}, TokenIDs: []int32{1, 2, 3}, Logprobs: []float32{-0.5, -0.25, 0},
					PromptTokens: 600, CompletionTokens: 40, PolicyLatencyMS: 812.5, ToolLatencyMS: 1.25,
				},
				{
					Index: 1, RequestKeep: 3, RequestAdded: []Message{{Role: "tool", Content: "OBSERVATION:\nFound", ToolCallID: "chatcmpl-tool-1", Name: "search_code_snippets"}},
					ToolName: "finish", ToolArgs: `{"answer":"x"}`, ActionKey: `finish{"answer":"x"}`,
					// nil lists stay null; empty lists stay empty
					Surfaced: Locations{Files: nil, Modules: []string{}, Entities: nil},
				},
			},
		},
		{
			// an infrastructure failure before the first turn
			JobID: "r/0/a__b-1/1", RunID: "r", InstanceID: "a__b-1", Repo: "a/b", Sample: 1,
			Status: StatusInfraError, Error: "worker lost", StartedAt: at(1),
		},
	}
}

func TestTrajectoryIPCRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	want := sampleTrajectories()
	rec := EncodeTrajectories(mem, want...)
	if rec.NumRows() != 3 {
		t.Fatalf("rows = %d, want 3 (two turns + one turnless trajectory)", rec.NumRows())
	}
	var buf bytes.Buffer
	if err := WriteIPC(&buf, TrajectorySchema(), rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	var got []Trajectory
	err := ReadIPC(&buf, func(rec arrow.RecordBatch) error {
		if v, _ := rec.Schema().Metadata().GetValue(MetaFormatVersion); v != Version {
			t.Errorf("format version metadata = %q, want %q", v, Version)
		}
		trs, err := DecodeTrajectories(rec)
		got = append(got, trs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed trajectories:\n got %+v\nwant %+v", got, want)
	}
}

func TestTrajectoryParquetRoundTrip(t *testing.T) {
	want := sampleTrajectories()
	rec := EncodeTrajectories(nil, want...)
	defer rec.Release()
	got := parquetRoundTrip(t, rec, DecodeTrajectories)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parquet round trip changed trajectories:\n got %+v\nwant %+v", got, want)
	}
}

func parquetRoundTrip[T any](t *testing.T, rec arrow.RecordBatch, decode func(arrow.RecordBatch) ([]T, error)) []T {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteParquet(&buf, rec); err != nil {
		t.Fatal(err)
	}
	var got []T
	err := ReadParquet(bytes.NewReader(buf.Bytes()), func(rec arrow.RecordBatch) error {
		rows, err := decode(rec)
		got = append(got, rows...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestContractsParquetRoundTrip(t *testing.T) {
	instances := []Instance{
		{InstanceID: "a__b-1", Repo: "a/b", BaseCommit: "abc1234", ProblemStatement: "ps", Patch: "diff", Extra: json.RawMessage(`{"hints_text":"h"}`)},
		{InstanceID: "a__b-2", Repo: "a/b", BaseCommit: "abc1235", ProblemStatement: "ps2", Patch: "diff2"},
	}
	golds := []Gold{
		{InstanceID: "a__b-1", Repo: "a/b", FileChanges: []FileChange{
			{File: "pkg/x.py", Changes: Changes{EditedEntities: []string{"pkg/x.py:C.m"}, EditedModules: []string{"pkg/x.py:C"}}},
			{File: "pkg/y.py"}, // file-level only: all lists nil
		}},
		{InstanceID: "a__b-2", Repo: "a/b", FileChanges: nil}, // null gold
	}
	shards := []ShardRow{{
		Span: Span{JobID: "r/0/a__b-1/0", RunID: "r", InstanceID: "a__b-1", FirstTurn: 0, LastTurn: 1},
		Messages: []Message{
			{Role: "system", Content: "sys"},
			{Role: "assistant", Content: "", ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "finish", Arguments: `{"answer":"x"}`}}}},
			{Role: "tool", Content: "obs", ToolCallID: "c1", Name: "finish"},
			{Role: "assistant", Content: "done", Reasoning: "why", ToolCalls: []ToolCall{}},
		},
		Tools:   []ToolSpec{{Type: "function", Function: ToolFunction{Name: "finish", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}}},
		Turns:   []int64{0, 1},
		Weights: []float64{1.2, 0.1}, Advantages: []float64{0.1, -1.5}, Returns: []float64{0.5, 0.4}, Rewards: []float64{0.1, 0.4},
		F1: LevelStats{File: 1, Module: 0.5, Entity: 0.25}, DC: LevelStats{File: 1},
	}}
	tokens := []TokenRow{{Span: Span{JobID: "r/0/a__b-1/0", RunID: "r", InstanceID: "a__b-1", LastTurn: 1},
		InputIDs: []int32{1, 2, 3}, LossWeights: []float32{0, 1.5, 1.5}}}
	jobs := []Job{sampleJob(), {JobID: "x", Tools: nil}}

	if got := parquetRoundTrip(t, encode(InstanceCodec(), instances), InstanceCodec().Decode); !reflect.DeepEqual(got, instances) {
		t.Errorf("instances:\n got %+v\nwant %+v", got, instances)
	}
	if got := parquetRoundTrip(t, encode(GoldCodec(), golds), GoldCodec().Decode); !reflect.DeepEqual(got, golds) {
		t.Errorf("gold:\n got %+v\nwant %+v", got, golds)
	}
	if got := parquetRoundTrip(t, encode(ShardCodec(), shards), ShardCodec().Decode); !reflect.DeepEqual(got, shards) {
		t.Errorf("shards:\n got %+v\nwant %+v", got, shards)
	}
	if got := parquetRoundTrip(t, encode(TokenCodec(), tokens), TokenCodec().Decode); !reflect.DeepEqual(got, tokens) {
		t.Errorf("tokens:\n got %+v\nwant %+v", got, tokens)
	}
	if got := parquetRoundTrip(t, encode(JobCodec(), jobs), JobCodec().Decode); !reflect.DeepEqual(got, jobs) {
		t.Errorf("jobs:\n got %+v\nwant %+v", got, jobs)
	}
}

func encode[T any](c *Codec[T], rows []T) arrow.RecordBatch { return c.Encode(nil, rows) }

func TestDecodeRejectsOtherContractsAndVersions(t *testing.T) {
	rec := encode(JobCodec(), []Job{sampleJob()})
	defer rec.Release()
	if _, err := ShardCodec().Decode(rec); err == nil || !strings.Contains(err.Error(), "holds job rows") {
		t.Errorf("decoding jobs as shards: err = %v", err)
	}
	md := arrow.NewMetadata([]string{MetaKind, MetaFormatVersion}, []string{KindJob, "999"})
	future := arrow.NewSchema(JobCodec().Schema().Fields(), &md)
	newer := array.NewRecordBatch(future, rec.Columns(), rec.NumRows())
	defer newer.Release()
	if _, err := JobCodec().Decode(newer); err == nil || !strings.Contains(err.Error(), "format version 999") {
		t.Errorf("future version: err = %v", err)
	}
	short := arrow.NewSchema(JobCodec().Schema().Fields()[1:], nil)
	missing := array.NewRecordBatch(short, rec.Columns()[1:], rec.NumRows())
	defer missing.Release()
	if _, err := JobCodec().Decode(missing); err == nil || !strings.Contains(err.Error(), `column "job_id" is missing`) {
		t.Errorf("missing column: err = %v", err)
	}
}

func TestGoldJSONMatchesReferenceFormat(t *testing.T) {
	g := Gold{InstanceID: "i", Repo: "o/r", BaseCommit: "c", ProblemStatement: "p", Patch: "d",
		FileChanges: []FileChange{{File: "a.py", Changes: Changes{EditedEntities: []string{"a.py:f"}, EditedModules: []string{"a.py:f"}}}, {File: "b.py"}}}
	out, _ := json.Marshal(g)
	want := `{"instance_id":"i","repo":"o/r","base_commit":"c","problem_statement":"p","patch":"d","file_changes":[{"file":"a.py","changes":{"edited_entities":["a.py:f"],"edited_modules":["a.py:f"]}},{"file":"b.py","changes":{}}]}`
	if string(out) != want {
		t.Errorf("gold JSON:\n got %s\nwant %s", out, want)
	}
	null, _ := json.Marshal(Gold{InstanceID: "i"})
	if !strings.Contains(string(null), `"file_changes":null`) {
		t.Errorf("null gold JSON = %s, want file_changes null", null)
	}
	loc := g.Locations()
	if !reflect.DeepEqual(loc.Files, []string{"a.py", "b.py"}) || !reflect.DeepEqual(loc.Entities, []string{"a.py:f"}) {
		t.Errorf("Locations = %+v", loc)
	}
}

func TestReadLocOutputsBothLayouts(t *testing.T) {
	in := `{"instance_id": "a", "sample": 2, "found_files": ["x.py"], "found_modules": [], "found_entities": ["x.py:f"], "raw_output": "r"}
{"instance_id": "b", "found_files": [["p.py"], ["q.py", "r.py"]], "found_modules": [[], []], "found_entities": [["p.py:g"]]}
{"instance_id": "c", "found_files": ["z.py"]}
`
	rows, err := ReadLocOutputs(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []LocOutput{
		{InstanceID: "a", Sample: 2, Files: []string{"x.py"}, Modules: []string{}, Entities: []string{"x.py:f"}, RawOutput: "r"},
		{InstanceID: "b", Sample: 0, Files: []string{"p.py"}, Modules: []string{}, Entities: []string{"p.py:g"}},
		{InstanceID: "b", Sample: 1, Files: []string{"q.py", "r.py"}, Modules: []string{}},
		{InstanceID: "c", Files: []string{"z.py"}}, // levels left out predict nothing
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", rows, want)
	}
	if _, err := ReadLocOutputs(strings.NewReader(`{"found_files": []}`)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("missing instance_id: err = %v", err)
	}
	if _, err := ReadLocOutputs(strings.NewReader(`{"instance_id": "d", "found_files": "x.py"}`)); err == nil ||
		err.Error() != "line 1: found_files must be a list of ids or a list of per-sample lists of ids" {
		t.Errorf("a string for a list: err = %v", err)
	}
	if _, err := ReadGold(strings.NewReader("{}\n")); err == nil {
		t.Error("gold row without instance_id accepted")
	}
}

func TestRequestDeltasRebuildEveryRequest(t *testing.T) {
	sys, task := Message{Role: "system", Content: "sys"}, Message{Role: "user", Content: "task"}
	call := ToolCall{ID: "c-1", Type: "function", Function: FunctionCall{Name: "search", Arguments: `{"q": "x"}`}}
	reply0 := Message{Role: "assistant", Content: "a", ToolCalls: []ToolCall{call}}
	tool0 := Message{Role: "tool", Content: "obs", ToolCallID: "c-1", Name: "search"}
	reply1 := Message{Role: "assistant", Content: "b"}
	keepGoing := Message{Role: "user", Content: "go on"}
	note := Message{Role: "user", Content: "[trimmed]"}
	requests := [][]Message{
		{sys, task},
		{sys, task, reply0, tool0},
		{sys, task, reply0, tool0, reply1, keepGoing},
		{sys, task, note, reply1, keepGoing}, // a trim: no longer an extension
	}
	replies := []Message{reply0, reply1, {Role: "assistant", Content: "c"}, {Role: "assistant", Content: "d"}}
	tr := Trajectory{JobID: "j"}
	var base []Message
	wantKeep := []int64{0, 3, 5, 2}
	for i, req := range requests {
		keep, added := RequestDelta(base, req)
		if keep != wantKeep[i] {
			t.Errorf("turn %d keeps %d, want %d", i, keep, wantKeep[i])
		}
		tr.Turns = append(tr.Turns, Turn{Index: int64(i), RequestKeep: keep, RequestAdded: added,
			AssistantContent: replies[i].Content, ToolCalls: replies[i].ToolCalls})
		base = append(slices.Clone(req), replies[i])
	}
	got, err := tr.Requests()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, requests) {
		t.Errorf("rebuilt requests:\n got %+v\nwant %+v", got, requests)
	}
	tr.Turns[1].RequestKeep = 9
	if _, err := tr.Requests(); err == nil {
		t.Error("a delta keeping more messages than exist was accepted")
	}
}

func TestPromptTokenDeltas(t *testing.T) {
	prompts := [][]int32{{1, 2, 3}, {1, 2, 3, 7, 8, 4, 5}, nil, {9, 9}, {9, 9, 6, 4}}
	completions := [][]int32{{7, 8}, {6}, {5}, {6}, {1}}
	wantKeep := []int64{0, 5, 0, 0, 3}
	tr := Trajectory{JobID: "j"}
	var base []int32
	for i, p := range prompts {
		keep, added := TokenDelta(base, p)
		if keep != wantKeep[i] || (p == nil) != (added == nil) {
			t.Errorf("turn %d: keep %d (want %d), added %v", i, keep, wantKeep[i], added)
		}
		tr.Turns = append(tr.Turns, Turn{Index: int64(i), PromptTokenKeep: keep, PromptTokenIDs: added, TokenIDs: completions[i]})
		base = nil
		if p != nil {
			base = append(slices.Clone(p), completions[i]...)
		}
	}
	got, err := tr.PromptIDs()
	if err != nil || !reflect.DeepEqual(got, prompts) {
		t.Errorf("rebuilt prompts %v (%v), want %v", got, err, prompts)
	}
}

// olderTrajectories re-labels an encoded batch as format version 4, as
// it was before turns named their replica: without that column.
func olderTrajectories(t *testing.T, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		if f.Name != "replica" {
			fields, cols = append(fields, f), append(cols, rec.Column(i))
		}
	}
	if len(fields) == len(rec.Schema().Fields()) {
		t.Fatal("no replica column to leave out")
	}
	md := arrow.NewMetadata([]string{MetaKind, MetaFormatVersion}, []string{KindTrajectory, "4"})
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}

// TestOlderFormatVersionsStillRead: data of format version 4 (turns
// without a replica) reads, the missing field as zero; a version older
// than OldestReadable, or newer than this build, is refused by name.
func TestOlderFormatVersionsStillRead(t *testing.T) {
	trs := sampleTrajectories()
	for i := range trs {
		for j := range trs[i].Turns {
			trs[i].Turns[j].Replica = "http://gpu-1:8000/v1"
		}
	}
	rec := EncodeTrajectories(nil, trs...)
	defer rec.Release()
	old := olderTrajectories(t, rec)
	got, err := DecodeTrajectories(old)
	if err != nil {
		t.Fatalf("version 4: %v", err)
	}
	for i := range trs {
		for j := range trs[i].Turns {
			trs[i].Turns[j].Replica = ""
		}
	}
	if !reflect.DeepEqual(got, trs) {
		t.Errorf("version 4 read back differs:\n got %+v\nwant %+v", got, trs)
	}
	for _, v := range []string{"3", "99"} {
		md := arrow.NewMetadata([]string{MetaKind, MetaFormatVersion}, []string{KindTrajectory, v})
		bad := array.NewRecordBatch(arrow.NewSchema(old.Schema().Fields(), &md), old.Columns(), old.NumRows())
		if _, err := DecodeTrajectories(bad); err == nil || !strings.Contains(err.Error(), "format version "+v) {
			t.Errorf("version %s: %v, want it refused", v, err)
		}
	}
}

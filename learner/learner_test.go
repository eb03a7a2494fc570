package learner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
)

var gold = map[string]schema.Locations{
	"i1": {Files: []string{"a/x.py"}, Modules: []string{"a/x.py:C"}, Entities: []string{"a/x.py:C.m"}},
}

func traj(sample int64, status schema.Status, surfaceGold bool, action string) schema.Trajectory {
	s1 := schema.Locations{Files: []string{"a/other.py"}}
	if surfaceGold {
		s1 = schema.Locations{Files: []string{"a/x.py"}, Modules: []string{"a/x.py:C"}, Entities: []string{"a/x.py:C.m"}}
	}
	return recorded(schema.Trajectory{
		JobID: schema.JobID("r", 0, "i1", sample), RunID: "r", InstanceID: "i1", Sample: sample, Status: status,
		ToolsJSON:   "[]",
		Predictions: schema.Locations{Files: []string{"a/x.py"}},
		Turns: []schema.Turn{
			{Index: 0, ToolName: "search_code_snippets", ToolArgs: `{"q":1}`, ActionKey: "search{1}", Observation: "obs", Surfaced: s1},
			{Index: 1, ToolName: "get_entity_contents", ToolArgs: `{}`, ActionKey: action, Observation: "obs2"},
			{Index: 2, ToolName: "finish", ToolArgs: `{"answer":"x"}`, ActionKey: "finish"},
		},
	})
}

// recorded gives a test trajectory the request/response record the agent
// keeps: each turn's reply calls its tool, each observation comes back as
// a tool message, and nothing is trimmed.
func recorded(tr schema.Trajectory) schema.Trajectory {
	base := []schema.Message{}
	for i := range tr.Turns {
		t := &tr.Turns[i]
		req := slices.Clone(base)
		if i == 0 {
			req = []schema.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "task " + tr.JobID}}
		} else if prev := tr.Turns[i-1]; prev.ToolName != "finish" {
			req = append(req, schema.Message{Role: "tool", Content: prev.Observation, ToolCallID: prev.ToolCalls[0].ID, Name: prev.ToolName})
		}
		t.RequestKeep, t.RequestAdded = schema.RequestDelta(base, req)
		t.ToolCalls = []schema.ToolCall{{ID: fmt.Sprintf("call-%d", i), Type: "function",
			Function: schema.FunctionCall{Name: t.ToolName, Arguments: t.ToolArgs}}}
		base = append(req, t.Response())
	}
	return tr
}

func TestProcessExcludesFailuresFromGroups(t *testing.T) {
	good := []schema.Trajectory{traj(0, schema.StatusOK, true, "read"), traj(1, schema.StatusOK, false, "read")}
	withFailure := append(append([]schema.Trajectory{}, good...), schema.Trajectory{
		JobID: "r/0/i1/2", InstanceID: "i1", Sample: 2, Status: schema.StatusInfraError})
	a, err := Process(good, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Process(withFailure, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := range good {
		if !reflect.DeepEqual(a.Trajectories[i].Advantages, b.Trajectories[i].Advantages) {
			t.Errorf("an infra_error trajectory changed the advantages of trajectory %d", i)
		}
	}
	if b.Trajectories[2].Skipped == "" || b.Trajectories[2].Advantages != nil {
		t.Errorf("failed trajectory = %+v", b.Trajectories[2])
	}
	// The one that found the gold has the higher return at every shared
	// step, so a positive advantage and a weight above 1.
	if a.Trajectories[0].Advantages[0] <= 0 || a.Trajectories[0].Weights[0] <= 1 || a.Trajectories[1].Advantages[0] >= 0 {
		t.Errorf("advantages %v / %v", a.Trajectories[0].Advantages, a.Trajectories[1].Advantages)
	}
	d := b.Diagnostics
	if d.Trajectories != 3 || d.Labeled != 2 || d.Steps != 6 || d.Coverage[0] != 1 {
		t.Errorf("diagnostics %+v", d)
	}
}

func TestShardRowsRoundTrip(t *testing.T) {
	played := []schema.Trajectory{traj(0, schema.StatusOK, true, "read"), traj(1, schema.StatusOK, false, "read"),
		traj(2, schema.StatusOK, true, "other")}
	for i := range played {
		played[i].Policy = schema.Policy{Kind: schema.PolicyOpenAI, Model: "r-it2", Version: "it2"}
	}
	res, err := Process(played, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := shard.NewWriter(shard.Config{Dir: dir, MaxRows: 1, Params: map[string]any{"H": 2}})
	if err != nil {
		t.Fatal(err)
	}
	var written []schema.ShardRow
	for _, lt := range res.Trajectories {
		td, ok, err := TrainingData(lt, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue // the trainer filter drops sample 1: it never saw a gold file
		}
		if len(td.Rows) != 1 {
			t.Fatalf("an untrimmed trajectory gave %d rows", len(td.Rows))
		}
		row := td.Rows[0]
		// system, task, then reply/tool for two turns and the final reply
		if len(row.Weights) != 3 || len(row.Turns) != 3 || len(row.Messages) != 2+2+2+1 || row.FirstTurn != 0 || row.LastTurn != 2 || row.PolicyVersion != "it2" {
			t.Fatalf("row has %d weights and %d messages: %+v", len(row.Weights), len(row.Messages), row)
		}
		written = append(written, row)
		if err := w.Add(row); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || m.Rows != 2 || len(m.Files) != 2 || m.Params["H"] != 2 {
		t.Fatalf("manifest %+v for %d rows", m, len(written))
	}
	var onDisk shard.Manifest
	data, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err := json.Unmarshal(data, &onDisk); err != nil || onDisk.Files[0].SHA256 == "" {
		t.Fatalf("manifest.json: %v %+v", err, onDisk)
	}
	var read []schema.ShardRow
	for _, f := range m.Files {
		file, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		err = schema.ReadParquet(file, func(rec arrow.RecordBatch) error {
			rows, err := schema.ShardCodec().Decode(rec)
			read = append(read, rows...)
			return err
		})
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(read, written) {
		t.Errorf("shards read back differ from what was written:\n got %+v\nwant %+v", read, written)
	}
	if m.TokenNote != shard.NoTokenIDs || m.TokenRows != 0 {
		t.Errorf("a run without token ids must say so: %+v", m)
	}
	if _, ok, _ := TrainingData(res.Trajectories[1], true); !ok {
		t.Error("the filter off must keep trajectories without gold discovery")
	}
}

func TestLabelsAndSweep(t *testing.T) {
	trs := []schema.Trajectory{traj(0, schema.StatusOK, true, "read"), traj(1, schema.StatusOK, false, "read")}
	res, err := Process(trs, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteLabels(&buf, res); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 6+2 {
		t.Fatalf("%d label lines, want 6 turns + 2 trajectories", len(lines))
	}
	var first map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	for _, key := range []string{"instance_id", "sample", "turn", "tool_name", "tool_args", "action_key", "progress_file",
		"progress_module", "progress_entity", "reward", "return", "advantage", "weight"} {
		if _, ok := first[key]; !ok {
			t.Errorf("turn label lacks %q: %s", key, lines[0])
		}
	}
	if first["progress_file"] != 1.0 {
		t.Errorf("turn 0 of sample 0 discovers the gold file: %s", lines[0])
	}
	rows, err := SweepH(trs, gold, DefaultConfig(), []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(rows[0].Coverage) != 2 || len(rows[2].Coverage) != 4 {
		t.Errorf("sweep rows %+v", rows)
	}
}

func TestSFTRowsPickTheBestTeacher(t *testing.T) {
	long := traj(0, schema.StatusOK, true, "read")
	short := traj(1, schema.StatusOK, true, "read")
	short.Turns = append(short.Turns[:1], short.Turns[2]) // same recall, fewer steps
	for _, tr := range []*schema.Trajectory{&long, &short} {
		tr.Predictions = schema.Locations{Files: []string{"a/x.py"}, Modules: []string{"a/x.py:C"}, Entities: []string{"a/x.py:C.m"}}
	}
	noEntity := traj(2, schema.StatusOK, true, "read") // answers the file only: no match at module/entity level
	res, err := Process([]schema.Trajectory{long, short, noEntity}, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rows := SFTRows(res)
	if len(rows) != 1 || rows[0].Trajectory.Sample != 1 {
		t.Fatalf("rows = %+v; want the shorter successful trajectory", rows)
	}
	for _, w := range rows[0].Weights {
		if w != 1 {
			t.Errorf("SFT weights must be 1: %v", rows[0].Weights)
		}
	}
}

// TestWriteShardsRecordsOneManifest: the learner service and replay both
// write through WriteShards, so every manifest records the same keys —
// hyperparameters, diagnostics, whether rows are supervised, and the
// source — and an SFT set holds only successful trajectories.
func TestWriteShardsRecordsOneManifest(t *testing.T) {
	perfect := traj(2, schema.StatusOK, true, "other")
	perfect.Predictions = gold["i1"]
	res, err := Process([]schema.Trajectory{traj(0, schema.StatusOK, true, "read"), traj(1, schema.StatusOK, false, "read"),
		perfect}, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, sft := range []bool{false, true} {
		dir := t.TempDir()
		m, kept, err := WriteShards(res, DefaultConfig(), ShardConfig{Dir: dir, SFT: sft, Source: map[string]any{"run": "r"}})
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var onDisk struct{ Params map[string]json.RawMessage }
		if err := json.Unmarshal(data, &onDisk); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range onDisk.Params {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"advantage", "diagnostics", "keep_unsuccessful", "rewards", "sft", "source"}; !slices.Equal(keys, want) {
			t.Errorf("sft=%v: manifest params %v, want %v", sft, keys, want)
		}
		var source map[string]string
		if err := json.Unmarshal(onDisk.Params["source"], &source); err != nil || source["run"] != "r" ||
			string(onDisk.Params["sft"]) != strconv.FormatBool(sft) {
			t.Errorf("sft=%v: params sft %s source %s", sft, onDisk.Params["sft"], onDisk.Params["source"])
		}
		// Training rows leave out the sample that never saw gold; SFT rows
		// keep only the one whose answer matches at every level.
		want := map[bool]int{false: 2, true: 1}[sft]
		if kept != want || m.Rows != want {
			t.Errorf("sft=%v: kept %d trajectories in %d rows, want %d in %d", sft, kept, m.Rows, want, want)
		}
		// The one reader gives the record back, typed.
		rec, err := ReadShardManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Rows != want || rec.SFT != sft || rec.Source.Run != "r" || !reflect.DeepEqual(rec.Diagnostics, res.Diagnostics) {
			t.Errorf("sft=%v: read back rows %d sft %v source %+v diagnostics %+v", sft, rec.Rows, rec.SFT, rec.Source, rec.Diagnostics)
		}
	}
	if _, err := ReadShardManifest(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a folder without a manifest: %v", err)
	}
}

// withTurns is a recorded trajectory of sample s playing the given
// actions, surfacing the gold file at turn 0 and answering it.
func withTurns(s int64, actions ...string) schema.Trajectory {
	tr := schema.Trajectory{JobID: schema.JobID("r", 0, "i1", s), RunID: "r", InstanceID: "i1", Sample: s,
		Status: schema.StatusOK, ToolsJSON: "[]", Predictions: schema.Locations{Files: []string{"a/x.py"}}}
	for i, a := range actions {
		turn := schema.Turn{Index: int64(i), ToolName: "search_code_snippets", ToolArgs: `{"q":"` + a + `"}`, ActionKey: a,
			Observation: "obs " + a}
		if i == 0 {
			turn.Surfaced = schema.Locations{Files: []string{"a/x.py"}}
		}
		tr.Turns = append(tr.Turns, turn)
	}
	return recorded(tr)
}

// branchOf forks parent at turn fork: the parent's first turns verbatim,
// then its own actions.
func branchOf(parent schema.Trajectory, s, fork int64, actions ...string) schema.Trajectory {
	own := withTurns(s, append(slices.Clone(actionsOf(parent)[:fork]), actions...)...)
	own.Fork = schema.Fork{ParentJobID: parent.JobID, ParentSample: parent.Sample, Turn: fork}
	copy(own.Turns, parent.Turns[:fork])
	return own
}

func actionsOf(tr schema.Trajectory) []string {
	var out []string
	for _, t := range tr.Turns {
		out = append(out, t.ActionKey)
	}
	return out
}

// TestBranchesJoinTheirSiblingsGroups: sample P and its two branches
// forked at turn 2 share P's first two actions, so at depths 1 and 2
// their turn 2 forms one group of exactly three (Q, unrelated, is in
// none of it); the branches' replayed turns are P's — no group counts
// them, the rows train them only in P, and the branches show P's returns
// and advantages there with weight 0.
func TestBranchesJoinTheirSiblingsGroups(t *testing.T) {
	p := withTurns(0, "a", "b", "c", "d")
	q := withTurns(1, "x", "y", "z")
	b1 := branchOf(p, 2, 2, "e", "f")
	b2 := branchOf(p, 3, 2, "g")
	cfg := DefaultConfig()
	cfg.Advantage.H, cfg.Advantage.NoEpisode = 1, true // depths 1 and 2
	res, err := Process([]schema.Trajectory{p, q, b1, b2}, gold, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lp, lq, l1, l2 := res.Trajectories[0], res.Trajectories[1], res.Trajectories[2], res.Trajectories[3]
	d := res.Diagnostics
	// Steps: P 4, Q 3, B1 2 own, B2 1 own. Depth 1 (key: the last
	// action): P0+Q0 (empty history), P2+B1_2+B2_2 (after b); depth 2:
	// P0+Q0, and the same trio (after a, b).
	if d.Steps != 10 || !near(d.Coverage[1], 5.0/10) || !near(d.Coverage[2], 5.0/10) {
		t.Errorf("steps %d coverage %v; want 10 steps, 0.5 at depths 1 and 2", d.Steps, d.Coverage)
	}
	g := []float64{lp.Labels.Returns[2], l1.Labels.Returns[2], l2.Labels.Returns[2]}
	mean := (g[0] + g[1] + g[2]) / 3
	w := 2.0 + 3.0 // depth weights (k+1) at k = 1, 2
	for i, lt := range []Labeled{lp, l1, l2} {
		want := w * (g[i] - mean) / (w + cfg.Advantage.DepthEpsilon)
		if !near(lt.Advantages[2], want) {
			t.Errorf("%s turn 2: advantage %g, want %g (the trio's)", lt.Trajectory.JobID, lt.Advantages[2], want)
		}
	}
	for _, lt := range []Labeled{l1, l2} {
		for turn := range 2 {
			if lt.Weights[turn] != 0 || lt.Advantages[turn] != lp.Advantages[turn] || lt.Labels.Returns[turn] != lp.Labels.Returns[turn] {
				t.Errorf("%s replayed turn %d: weight %g, advantage %g, return %g; want 0 and P's %g, %g", lt.Trajectory.JobID, turn,
					lt.Weights[turn], lt.Advantages[turn], lt.Labels.Returns[turn], lp.Advantages[turn], lp.Labels.Returns[turn])
			}
		}
	}
	if lq.Advantages[2] != 0 {
		t.Errorf("Q's turn 2 (after x, y) is alone, advantage %g", lq.Advantages[2])
	}
	if b := d.Branches; b == nil || b.Branches != 2 || b.BaseSteps != 7 || b.BranchSteps != 3 {
		t.Errorf("branch diagnostics %+v, want 2 branches, 7 base and 3 branch steps", b)
	}
	trained := map[string]int{}
	for _, lt := range res.Trajectories {
		td, ok, err := TrainingData(lt, true)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", lt.Trajectory.JobID, ok, err)
		}
		for _, row := range td.Rows {
			for a, turn := range row.Turns {
				if turn >= row.FirstTurn && turn <= row.LastTurn {
					trained[fmt.Sprintf("%d#%d", row.Sample, turn)]++
				} else if row.Weights[a] != 0 {
					t.Errorf("%s: context turn %d weighs %g", row.JobID, turn, row.Weights[a])
				}
			}
		}
	}
	want := map[string]int{"0#0": 1, "0#1": 1, "0#2": 1, "0#3": 1, "1#0": 1, "1#1": 1, "1#2": 1, "2#2": 1, "2#3": 1, "3#2": 1}
	if !reflect.DeepEqual(trained, want) {
		t.Errorf("trained turns %v, want %v", trained, want)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestProcessLeavesOutWhatDidNotPlayOut: a sample with turns that ended
// for a reason outside the policy (a server refusing it, a tool, the
// farm, the clock) is skipped and leaves its group's advantages as they
// were; a truncated one, the policy's own course, counts.
func TestProcessLeavesOutWhatDidNotPlayOut(t *testing.T) {
	good := []schema.Trajectory{traj(0, schema.StatusOK, true, "read"), traj(1, schema.StatusOK, false, "read")}
	base, err := Process(good, gold, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status  schema.Status
		counted bool
	}{
		{schema.StatusPolicyError, false}, {schema.StatusToolError, false}, {schema.StatusTimeout, false},
		{schema.StatusInfraError, false}, {schema.StatusTruncated, true},
	} {
		third := traj(2, tc.status, false, "read")
		res, err := Process(append(slices.Clone(good), third), gold, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		same := reflect.DeepEqual(res.Trajectories[0].Advantages, base.Trajectories[0].Advantages)
		if skipped := res.Trajectories[2].Skipped != ""; skipped == tc.counted || same == tc.counted {
			t.Errorf("%s with turns: skipped %v (%q), group advantages unchanged %v; want counted %v",
				tc.status, skipped, res.Trajectories[2].Skipped, same, tc.counted)
		}
	}
}

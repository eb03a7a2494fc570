package metrics

import (
	"math"
	"slices"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/java"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/schema"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestAtKAndExact(t *testing.T) {
	gold := []string{"a.py", "b.py"}
	tests := []struct {
		name  string
		pred  []string
		k     int
		atK   PRF
		exact PRF
	}{
		{"empty predictions", nil, 5, PRF{}, PRF{}},
		{"one hit of two, fixed denominator", []string{"x.py", "a.py"}, 5, prf(1.0/5, 1.0/2), prf(1.0/2, 1.0/2)},
		{"duplicates count once", []string{"a.py", "a.py", "a.py"}, 5, prf(1.0/5, 1.0/2), prf(1, 1.0/2)},
		{"beyond the cut-off", []string{"x.py", "y.py", "a.py"}, 2, PRF{}, prf(1.0/3, 1.0/2)},
		{"all found", []string{"b.py", "a.py"}, 5, prf(2.0/5, 1), prf(1, 1)},
	}
	for _, tt := range tests {
		if got := AtK(tt.pred, gold, tt.k); !near(got.P, tt.atK.P) || !near(got.R, tt.atK.R) || !near(got.F1, tt.atK.F1) {
			t.Errorf("%s: AtK = %+v, want %+v", tt.name, got, tt.atK)
		}
		if got := Exact(tt.pred, gold); !near(got.P, tt.exact.P) || !near(got.R, tt.exact.R) || !near(got.F1, tt.exact.F1) {
			t.Errorf("%s: Exact = %+v, want %+v", tt.name, got, tt.exact)
		}
	}
	if got := AtK([]string{"a.py"}, nil, 5); got != (PRF{}) {
		t.Errorf("empty gold: %+v", got)
	}
}

func TestRankingMetrics(t *testing.T) {
	gold := []string{"g1", "g2"}
	pred := []string{"x", "g1", "y", "g2"}
	// relevance 0 1 0 1
	if got := AccAtK(pred, gold, 1); got != 0 {
		t.Errorf("acc@1 = %v", got)
	}
	if got := AccAtK(pred, gold, 3); got != 0 { // needs 2 gold in top 3, has 1
		t.Errorf("acc@3 = %v", got)
	}
	if got := AccAtK(pred, gold, 5); got != 1 {
		t.Errorf("acc@5 = %v", got)
	}
	if got := AccAtK([]string{"g1"}, []string{"g1"}, 1); got != 1 {
		t.Errorf("acc@1 single = %v", got)
	}
	// DCG = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3)
	wantNDCG := (1/math.Log2(3) + 1/math.Log2(5)) / (1 + 1/math.Log2(3))
	if got := NDCGAtK(pred, gold, 5); !near(got, wantNDCG) {
		t.Errorf("ndcg@5 = %v, want %v", got, wantNDCG)
	}
	// precision at relevant ranks: 1/2 and 2/4, over k = 5
	if got := MAPAtK(pred, gold, 5); !near(got, (0.5+0.5)/5) {
		t.Errorf("map@5 = %v", got)
	}
	if NDCGAtK(nil, gold, 5) != 0 || MAPAtK(pred, nil, 5) != 0 || AccAtK(pred, nil, 5) != 0 {
		t.Error("empty sides must score 0")
	}
}

func TestNormalizeFunctions(t *testing.T) {
	got := NormalizeFunctions([]string{"a.py:C.__init__", "a.py:C", "a.py:f", "a.py:f"}, lang.NewSet(python.Language{}))
	want := []string{"a.py:C", "a.py:f"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("NormalizeFunctions = %q, want %q", got, want)
	}
}

func TestLenientPRF(t *testing.T) {
	gold := []string{"a.py:Foo.bar", "b.py:baz"}
	tests := []struct {
		name string
		pred []string
		want PRF
	}{
		{"exact", []string{"a.py:Foo.bar"}, prf(1, 0.5)},
		{"prefix: class for its method", []string{"a.py:Foo"}, prf(1, 0.5)},
		{"suffix: method name alone", []string{"a.py:bar"}, prf(1, 0.5)},
		{"other file does not match", []string{"c.py:Foo.bar"}, PRF{}},
		{"file id against entities", []string{"a.py"}, PRF{}},
		{"partial names do not match", []string{"a.py:Fo"}, PRF{}},
		{"both, plus noise", []string{"a.py:Foo", "b.py:baz", "z.py:q"}, prf(2.0/3, 1)},
		{"empty", nil, PRF{}},
	}
	for _, tt := range tests {
		got := LenientPRF(tt.pred, gold)
		if !near(got.P, tt.want.P) || !near(got.R, tt.want.R) || !near(got.F1, tt.want.F1) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	// Files (no ":" anywhere) match exactly.
	if got := LenientPRF([]string{"a.py", "x.py"}, []string{"a.py"}); !near(got.P, 0.5) || !near(got.R, 1) {
		t.Errorf("files: %+v", got)
	}
}

func TestCommit(t *testing.T) {
	gold := []string{"g1", "g2", "g3"}
	c := Commit([]string{"g1", "g2", "x"}, []string{"g1", "y"}, gold)
	// observed gold g1, g2; committed g1 -> DC 1/2; gap 2/3 - 1/3; type B
	if !near(c.DC, 0.5) || !near(c.Gap, 1.0/3) || !c.TypeB {
		t.Errorf("Commit = %+v", c)
	}
	if c := Commit(nil, []string{"g1"}, gold); c.DC != 0 || !near(c.Gap, -1.0/3) || c.TypeB {
		t.Errorf("nothing observed: %+v", c)
	}
	if c := Commit([]string{"g1"}, []string{"g1"}, nil); c != (Commitment{}) {
		t.Errorf("empty gold: %+v", c)
	}
}

func TestEvaluateAveragesSamplesAndSkipsEmptyGold(t *testing.T) {
	golds := []schema.Gold{
		{InstanceID: "o__r-1", Repo: "o/r", FileChanges: []schema.FileChange{{File: "a.py",
			Changes: schema.Changes{EditedEntities: []string{"a.py:f"}, EditedModules: []string{"a.py:f"}}}}},
		{InstanceID: "o__r-2", Repo: "o/r", FileChanges: []schema.FileChange{{File: "b.py"}}}, // file-level gold only
		{InstanceID: "p__q-1", Repo: "p/q", FileChanges: nil},                                 // null gold: skipped
	}
	preds := []schema.LocOutput{
		{InstanceID: "o__r-1", Sample: 0, Files: []string{"a.py"}, Modules: []string{"a.py:f"}, Entities: []string{"a.py:f"}},
		{InstanceID: "o__r-1", Sample: 1, Files: []string{"z.py"}},
		{InstanceID: "o__r-2", Sample: 0, Files: []string{"b.py"}},
		// o__r-2 has no sample 1: it scores 0 there
	}
	rep, err := Evaluate(preds, golds, EvalOptions{Languages: lang.NewSet(python.Language{})})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Instances != 2 || rep.Samples != 2 || rep.Missing != 1 {
		t.Fatalf("instances %d samples %d missing %d", rep.Instances, rep.Samples, rep.Missing)
	}
	// file recall@k: sample 0 -> (1 + 1)/2, sample 1 -> (0 + 0)/2; mean 0.5
	if got := rep.Overall["file.recall@k"]; !near(got, 0.5) {
		t.Errorf("file.recall@k = %v, want 0.5", got)
	}
	// function level exists only for o__r-1: (1 + 0)/2
	if got := rep.Overall["function.recall@k"]; !near(got, 0.5) {
		t.Errorf("function.recall@k = %v, want 0.5", got)
	}
	if got := rep.Overall["file.precision@k"]; !near(got, (1.0/5+1.0/5)/4) {
		t.Errorf("file.precision@k = %v", got)
	}
	if _, ok := rep.PerRepo["p/q"]; ok {
		t.Error("a repo with only null gold got a row")
	}
	only, err := Evaluate(preds[:1], golds, EvalOptions{Languages: lang.NewSet(python.Language{}), OnlyPredicted: true})
	if err != nil || only.Instances != 1 || only.Overall["file.recall@k"] != 1 {
		t.Errorf("only predicted: %+v, %v", only, err)
	}
}

func TestTrajectoryStats(t *testing.T) {
	golds := []schema.Gold{{InstanceID: "i", FileChanges: []schema.FileChange{{File: "a.py",
		Changes: schema.Changes{EditedEntities: []string{"a.py:f"}, EditedModules: []string{"a.py:f"}}}}}}
	trs := []schema.Trajectory{
		{ // saw the gold file and function, answered only the file
			InstanceID: "i", Predictions: schema.Locations{Files: []string{"a.py"}},
			Turns: []schema.Turn{
				{ToolName: "search_code_snippets", ObservationChars: 100, Surfaced: schema.Locations{Files: []string{"a.py"}, Entities: []string{"a.py:f"}, Modules: []string{"a.py:f"}}},
				{ToolName: "search_code_snippets", ObservationChars: 50},
				{ToolName: "finish"},
			},
			PromptTokens: 30,
		},
		{ // saw nothing, answered the function
			InstanceID: "i", Predictions: schema.Locations{Files: []string{"a.py"}, Entities: []string{"a.py:f"}, Modules: []string{"a.py:f"}},
			Turns:        []schema.Turn{{ToolName: "get_entity_contents", ObservationChars: 10}},
			PromptTokens: 10,
		},
	}
	st := TrajectoryStats(trs, golds, lang.NewSet(python.Language{}))
	want := map[string]float64{
		"file.dc_gap":                     (0 + (0 - 1)) / 2.0, // t1: seen 1 committed 1 -> 0; t2: seen 0 committed 1 -> -1
		"function.dc_gap":                 ((1 - 0) + (0 - 1)) / 2.0,
		"function.type_b_rate":            0.5,
		"file.type_b_rate":                0,
		"turns":                           2,
		"observation_chars":               80,
		"prompt_tokens":                   20,
		"tool_calls.search_code_snippets": 1,
		"tool_calls.get_entity_contents":  0.5,
	}
	for k, v := range want {
		if !near(st[k], v) {
			t.Errorf("%s = %v, want %v", k, st[k], v)
		}
	}
}

// TestEvaluateBreaksDownByLanguage: an instance counts for the language
// of its gold files; each language's scores are its instances' alone.
func TestEvaluateBreaksDownByLanguage(t *testing.T) {
	golds := []schema.Gold{
		{InstanceID: "py-1", Repo: "o/r", FileChanges: []schema.FileChange{{File: "a.py"}}},
		{InstanceID: "go-1", Repo: "o/r", FileChanges: []schema.FileChange{{File: "cmd/main.go"}}},
		{InstanceID: "go-2", Repo: "p/q", FileChanges: []schema.FileChange{{File: "x.go"}, {File: "y.py"}}},
		{InstanceID: "java-1", Repo: "j/k", FileChanges: []schema.FileChange{{File: "src/main/java/a/B.java"}}},
	}
	preds := []schema.LocOutput{
		{InstanceID: "py-1", Files: []string{"a.py"}},
		{InstanceID: "go-1", Files: []string{"other.go"}},
		{InstanceID: "go-2", Files: []string{"x.go"}},
		{InstanceID: "java-1", Files: []string{"src/main/java/a/C.java", "src/main/java/a/B.java"}},
	}
	rep, err := Evaluate(preds, golds, EvalOptions{Languages: lang.NewSet(python.Language{}, golang.Language{}, java.Language{})})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Languages(); !slices.Equal(got, []string{"go", "java", "python"}) {
		t.Fatalf("languages %v, want [go java python]", got)
	}
	// java: the gold file found second: recall 1, acc@1 0, acc@3 1.
	if java := rep.PerLanguage["java"]; !near(java["file.recall@k"], 1) || !near(java["file.acc@3"], 1) || java["file.acc@1"] != 0 {
		t.Errorf("java scores %v; want file recall@k 1, acc@1 0, acc@3 1", java)
	}
	// go: go-1 misses (0), go-2 finds one of two files (0.5).
	if got := rep.PerLanguage["go"]["file.recall@k"]; !near(got, 0.25) {
		t.Errorf("go file.recall@k = %v, want 0.25", got)
	}
	if got := rep.PerLanguage["python"]["file.recall@k"]; !near(got, 1) {
		t.Errorf("python file.recall@k = %v, want 1", got)
	}
}

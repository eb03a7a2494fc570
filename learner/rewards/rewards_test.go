package rewards

import (
	"math"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/schema"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

var gold = schema.Locations{Files: []string{"a/x.py"}, Modules: []string{"a/x.py:C"}, Entities: []string{"a/x.py:C.m"}}

func trajectory() schema.Trajectory {
	return schema.Trajectory{
		Turns: []schema.Turn{
			{ToolName: "search_code_snippets", Surfaced: schema.Locations{Files: []string{"a/x.py"}}},
			{ToolName: "get_entity_contents", AssistantContent: "maybe b/y.py:D.n",
				Observation: "Found function `a/x.py:C.m`.", Surfaced: schema.Locations{Modules: []string{"a/x.py:C"}}},
			{ToolName: "finish", ToolArgs: `{"answer":"a/x.py:C"}`},
		},
		Predictions: schema.Locations{Files: []string{"a/x.py"}, Modules: []string{"a/x.py:C"}, Entities: []string{"a/x.py:C"}},
	}
}

// TestLabelHandWorked follows one trajectory through every term.
func TestLabelHandWorked(t *testing.T) {
	lb, ok := Label(trajectory(), gold, DefaultConfig())
	if !ok {
		t.Fatal("not labelled")
	}
	wantProgress := [][3]float64{{1, 0, 0}, {0, 1, 1}, {0, 0, 0}}
	for i, p := range wantProgress {
		if lb.Progress[i] != p {
			t.Errorf("progress[%d] = %v, want %v", i, lb.Progress[i], p)
		}
	}
	// F1: lenient, C matches C.m -> 1 at every level. DC: entity C.m was
	// seen but C is committed, exact -> 0; files and modules 1.
	if lb.F1 != [3]float64{1, 1, 1} || lb.DC != [3]float64{1, 1, 0} {
		t.Errorf("F1 %v DC %v", lb.F1, lb.DC)
	}
	r2 := -0.02 + (1 + 0.5 + 0.5) + 0.5*(1+0.5+0)
	want := []float64{0.98, 0.98, r2}
	for i := range want {
		if !near(lb.Rewards[i], want[i]) {
			t.Errorf("rewards = %v, want %v", lb.Rewards, want)
			break
		}
	}
	wantParts := []Parts{{Discovery: 1, StepCost: -0.02}, {Discovery: 1, StepCost: -0.02},
		{StepCost: -0.02, Terminal: 2, Commit: 0.75}}
	for i, p := range wantParts {
		if !near(lb.Parts[i].Discovery, p.Discovery) || !near(lb.Parts[i].StepCost, p.StepCost) ||
			!near(lb.Parts[i].Terminal, p.Terminal) || !near(lb.Parts[i].Commit, p.Commit) {
			t.Errorf("parts[%d] = %+v, want %+v", i, lb.Parts[i], p)
		}
	}
	g1 := 0.98 + 0.9*r2
	if !near(lb.Returns[2], r2) || !near(lb.Returns[1], g1) || !near(lb.Returns[0], 0.98+0.9*g1) {
		t.Errorf("returns = %v", lb.Returns)
	}
}

func TestTerminalOnly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TerminalOnly = true
	lb, _ := Label(trajectory(), gold, cfg)
	if lb.Rewards[0] != 0 || lb.Rewards[1] != 0 || !near(lb.Rewards[2], 2) {
		t.Errorf("terminal-only rewards = %v", lb.Rewards)
	}
	if lb.Parts[2] != (Parts{Terminal: 2}) {
		t.Errorf("terminal-only parts = %+v, want the terminal F1 alone", lb.Parts[2])
	}
}

// TestReferenceDiscovery: mentions anywhere count, including the agent's
// own words and the finish answer.
func TestReferenceDiscovery(t *testing.T) {
	tr := trajectory()
	tr.Turns[0].Surfaced = schema.Locations{}
	tr.Turns[0].AssistantContent = "I bet it is ./a/x.py:C.m."
	cfg := DefaultConfig()
	cfg.Discovery, cfg.Languages = DiscoveryReference, lang.NewSet(python.Language{})
	lb, _ := Label(tr, gold, cfg)
	// The trailing dot stays attached to the mention ("C.m."), so the
	// entity is not found at turn 0, but file and module are.
	if lb.Progress[0] != [3]float64{1, 1, 0} {
		t.Errorf("reference progress[0] = %v", lb.Progress[0])
	}
	if lb.Recall != [3]float64{1, 1, 1} {
		t.Errorf("final recall = %v", lb.Recall)
	}
	surfaced, _ := Label(tr, gold, DefaultConfig())
	if surfaced.Progress[0] != [3]float64{} {
		t.Errorf("the agent's own words must not count as discovery: %v", surfaced.Progress[0])
	}
}

func TestUnlabelled(t *testing.T) {
	if _, ok := Label(schema.Trajectory{}, gold, DefaultConfig()); ok {
		t.Error("a trajectory without turns was labelled")
	}
	if _, ok := Label(trajectory(), schema.Locations{}, DefaultConfig()); ok {
		t.Error("a trajectory without gold files was labelled")
	}
}

func TestContainsID(t *testing.T) {
	for _, tt := range []struct {
		text, id string
		want     bool
	}{
		{"Found `a/x.py`.", "a/x.py", true},
		{"see pkg/a/x.py", "a/x.py", false},
		{"a/x.py:C.m", "a/x.py:C", false},
		{"end a/x.py:C.", "a/x.py:C", true},
		{"a/x.pyx", "a/x.py", false},
	} {
		if got := containsID(tt.text, tt.id); got != tt.want {
			t.Errorf("containsID(%q, %q) = %v", tt.text, tt.id, got)
		}
	}
}

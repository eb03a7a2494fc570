package agent

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/tools"
)

// recordingModel answers like the script and keeps every request it gets.
type recordingModel struct {
	requests []ModelRequest
}

func (m *recordingModel) Next(_ context.Context, req ModelRequest) (*ModelReply, error) {
	m.requests = append(m.requests, req)
	call := func(id, name, args string) llm.ToolCall {
		return llm.ToolCall{ID: id, Type: "function", Function: llm.FunctionCall{Name: name, Arguments: args}}
	}
	var calls []llm.ToolCall
	switch req.Turn {
	case 0: // two calls in one turn: two observations in one record
		calls = []llm.ToolCall{call("a", tools.SearchCodeSnippets, `{"search_terms":["Warehouse"]}`),
			call("b", tools.GetEntityContents, `{"entity_names":["inventory/models.py:Warehouse"]}`)}
	case 1:
		return &ModelReply{Message: llm.Message{Role: "assistant", Content: "thinking"}}, nil
	case 2, 3:
		calls = []llm.ToolCall{call(fmt.Sprint("c", req.Turn), tools.SearchCodeSnippets, fmt.Sprintf(`{"search_terms":["seed %d"]}`, req.Seed))}
	default:
		calls = []llm.ToolCall{call("f", tools.Finish, `{"answer":"inventory/models.py"}`)}
	}
	return &ModelReply{Message: llm.Message{Role: "assistant", ToolCalls: calls}, PromptTokens: int64(100 * (req.Turn + 1))}, nil
}

func branchOf(parent schema.Trajectory, turn int64) schema.Job {
	job := schema.Job{JobID: "r/0/i/9", RunID: "r", InstanceID: "i", Sample: 9, ProblemStatement: "Warehouse.remove_item is wrong",
		Policy: parent.Policy, Sampling: schema.Sampling{Seed: 900}, Attempt: 1,
		Fork: schema.Fork{ParentJobID: parent.JobID, ParentSample: parent.Sample, Turn: turn}}
	return job
}

// TestBranchReplaysItsParent: a branch sends its first request at the
// fork turn, with exactly the parent's messages there (the multi-call
// turn and the plain-text turn rebuilt from the record), keeps the
// parent's turns verbatim, and samples its own from there with its seed.
func TestBranchReplaysItsParent(t *testing.T) {
	parentModel := &recordingModel{}
	parent, err := Run(context.Background(), Config{}, episode(t, parentModel))
	if err != nil || parent.Status != schema.StatusOK || len(parent.Turns) != 5 {
		t.Fatalf("parent: %s, %d turns, %v", parent.Status, len(parent.Turns), err)
	}
	if got := parent.Turns[0].ObservationParts; len(got) != 2 || int(got[0]+got[1]+2) != len(parent.Turns[0].Observation) {
		t.Fatalf("the multi-call turn records parts %v of %d bytes", got, len(parent.Turns[0].Observation))
	}
	for fork := int64(1); fork < 5; fork++ {
		t.Run(fmt.Sprintf("fork at %d", fork), func(t *testing.T) {
			m := &recordingModel{}
			ep := episode(t, m)
			ep.Job, ep.Parent = branchOf(parent, fork), &parent
			tr, err := Run(context.Background(), Config{}, ep)
			if err != nil || tr.Status != schema.StatusOK {
				t.Fatalf("branch: %s %q, %v", tr.Status, tr.Error, err)
			}
			if len(m.requests) == 0 || m.requests[0].Turn != int(fork) {
				t.Fatalf("the branch's first request was for turn %d, want the fork turn %d", m.requests[0].Turn, fork)
			}
			first := m.requests[0]
			if !slices.EqualFunc(first.Messages, parentModel.requests[fork].Messages, schema.MessagesEqual) ||
				!reflect.DeepEqual(first.Tools, parentModel.requests[fork].Tools) {
				t.Errorf("the fork turn's request is not the parent's")
			}
			if first.Seed != 900 || first.Sample != 9 {
				t.Errorf("the branch sampled with seed %d sample %d, want its own 900 and 9", first.Seed, first.Sample)
			}
			if !reflect.DeepEqual(tr.Turns[:fork], parent.Turns[:fork]) || tr.Fork != ep.Job.Fork || tr.OwnTurns() != int(fork) {
				t.Errorf("the branch does not keep its parent's turns and fork")
			}
		})
	}
}

// TestBranchRefusesARecordItCannotReplay: a record that is missing, of
// another job, too short, cut wrongly, or that the episode loop does not
// rebuild ends the branch as an infra_error naming why, and no turn of
// the record is sampled again.
func TestBranchRefusesARecordItCannotReplay(t *testing.T) {
	parent, err := Run(context.Background(), Config{}, episode(t, &recordingModel{}))
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(f func(tr *schema.Trajectory)) *schema.Trajectory {
		tr := parent
		tr.Turns = slices.Clone(parent.Turns)
		f(&tr)
		return &tr
	}
	tests := []struct {
		name   string
		parent *schema.Trajectory
		fork   int64
		want   string
	}{
		{"no record", nil, 2, "record of its parent"},
		{"another job's record", tamper(func(tr *schema.Trajectory) { tr.JobID = "r/0/i/7" }), 2, "given the record of r/0/i/7"},
		{"fork past the record", &parent, 5, "not within its parent's 5 turns"},
		{"parts that do not cut", tamper(func(tr *schema.Trajectory) { tr.Turns[0].ObservationParts = []int64{3} }), 2, "observation parts"},
		{"a request the loop does not rebuild", tamper(func(tr *schema.Trajectory) {
			tr.Turns[1].RequestAdded = slices.Clone(tr.Turns[1].RequestAdded)
			tr.Turns[1].RequestAdded[0].Content += " (edited)"
		}), 2, "turn 1's request"},
		{"other tools", tamper(func(tr *schema.Trajectory) { tr.ToolsJSON = "[]" }), 2, "other tools"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recordingModel{}
			ep := episode(t, m)
			ep.Job, ep.Parent = branchOf(parent, tt.fork), tt.parent
			tr, err := Run(context.Background(), Config{}, ep)
			if err != nil || tr.Status != schema.StatusInfraError || !strings.Contains(tr.Error, tt.want) {
				t.Errorf("%s %q (%v), want an infra_error naming %q", tr.Status, tr.Error, err, tt.want)
			}
			if len(m.requests) > 0 {
				t.Errorf("the policy was asked %d times", len(m.requests))
			}
		})
	}
}

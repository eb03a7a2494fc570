package branch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/a2farm/a2farm/schema"
)

// trajectory builds base sample s of one instance whose turns take the
// given actions.
func trajectory(s int64, status schema.Status, actions ...string) schema.Trajectory {
	tr := schema.Trajectory{JobID: fmt.Sprintf("r/0/i/%d", s), RunID: "r", InstanceID: "i", Sample: s, Status: status}
	for i, a := range actions {
		tr.Turns = append(tr.Turns, schema.Turn{Index: int64(i), ActionKey: a})
	}
	return tr
}

func points(ps []Point) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%d@%d", p.Parent.Sample, p.Turn))
	}
	return out
}

func TestPlan(t *testing.T) {
	ok, failed := schema.StatusOK, schema.StatusPolicyError
	base := []schema.Trajectory{
		trajectory(2, ok, "a", "b", "c", "d"),
		trajectory(0, ok, "a", "b", "c", "f"),
		trajectory(1, schema.StatusTruncated, "a", "x", "y"),
		trajectory(3, failed, "a", "b", "z", "w", "v"),
		trajectory(4, schema.StatusInfraError),
	}
	tests := []struct {
		name string
		b    schema.Branching
		want []string
	}{
		{"off", schema.Branching{}, nil},
		// Failed parents never fork; a parent forks only at turns it lived past.
		{"fixed turns", schema.Branching{Branches: 2, ForkAt: []int64{3, 1, 3}}, []string{"0@1", "0@3", "1@1", "2@1", "2@3"}},
		// Depth-2 keys at t >= 2: (a,b) for samples 0, 2 and the failed 3
		// (the learner groups it: it may not fork, but it is a sibling);
		// (b,c) twice at t=3; sample 1's (a,x) at t=2 is alone. Base
		// turns 16, budget 0.2 → 3 turns; sample 1's rest at t=2 averages
		// (4-2 + 3-2 + 4-2)/3 → 2 turns.
		{"auto", schema.Branching{Branches: 1, Budget: 0.2, Depth: 2}, []string{"1@2"}},
		{"auto over budget", schema.Branching{Branches: 1, Budget: 0.1, Depth: 2}, nil},
		// Two branches cost 4 turns: over 0.2·16.
		{"auto, two branches over budget", schema.Branching{Branches: 2, Budget: 0.2, Depth: 2}, nil},
		// Depth 1: keys a (t=1: samples 0,1,2), b (t=2: 0,2), x (t=2: 1),
		// c (t=3: 0,2): only 1@2 is alone.
		{"auto depth 1", schema.Branching{Branches: 3, Budget: 1, Depth: 1}, []string{"1@2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := points(Plan(tt.b, base))
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan %v, want %v", got, tt.want)
			}
		})
	}
}

// TestJobsNumberBranchesAfterTheSamples: branch b of point i is sample
// N + i·M + b, with its own seed, the parent's record and the run's spec.
func TestJobsNumberBranchesAfterTheSamples(t *testing.T) {
	spec := schema.RunSpec{Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Seed: 7,
		Branching: schema.Branching{Branches: 2, ForkAt: []int64{1}}}
	in := schema.Instance{InstanceID: "i", Repo: "o/r", BaseCommit: "abc", ProblemStatement: "p"}
	ps := []Point{{trajectory(0, schema.StatusOK, "a", "b"), 1}, {trajectory(3, schema.StatusOK, "a", "c"), 1}}
	jobs := Jobs(spec, "r", 0, in, 4, ps, func(p schema.Trajectory) int64 { return 100 + p.Sample })
	var got []string
	for _, j := range jobs {
		got = append(got, fmt.Sprintf("%s %d parent=%s@%d turn=%d branch=%d seed=%d", j.JobID, j.Sample, j.Fork.ParentJobID,
			j.Fork.LogSeq, j.Fork.Turn, j.Fork.Branch, j.Sampling.Seed))
		if j.ProblemStatement != "p" || j.Repo != "o/r" || j.Policy.Kind != schema.PolicyHeuristic {
			t.Errorf("%s lost the run's spec or instance: %+v", j.JobID, j)
		}
	}
	want := []string{
		fmt.Sprintf("r/0/i/4 4 parent=r/0/i/0@100 turn=1 branch=0 seed=%d", schema.SampleSeed(7, 4)),
		fmt.Sprintf("r/0/i/5 5 parent=r/0/i/0@100 turn=1 branch=1 seed=%d", schema.SampleSeed(7, 5)),
		fmt.Sprintf("r/0/i/6 6 parent=r/0/i/3@103 turn=1 branch=0 seed=%d", schema.SampleSeed(7, 6)),
		fmt.Sprintf("r/0/i/7 7 parent=r/0/i/3@103 turn=1 branch=1 seed=%d", schema.SampleSeed(7, 7)),
	}
	if !slices.Equal(got, want) {
		t.Errorf("jobs\n%v\nwant\n%v", got, want)
	}
}

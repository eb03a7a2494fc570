package policy

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/repoindex"
	"github.com/a2farm/a2farm/worker/tools"
)

// BenchmarkTurnOverhead measures what a turn costs outside the policy:
// tool execution, context trimming, recording, bookkeeping. Heuristic
// episodes over the sample are recorded once, then replayed (the replay
// policy answers instantly); per turn, overhead = turn wall time minus the
// policy's latency. Reports p50 and p99 over all turns.
func BenchmarkTurnOverhead(b *testing.B) {
	l, err := sample.Write(filepath.Join(b.TempDir(), "sample"))
	if err != nil {
		b.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	type prepared struct {
		inst schema.Instance
		idx  *repoindex.Index
	}
	var insts []prepared
	for _, inst := range l.Instances {
		idx, err := repoindex.Build(context.Background(), repos, inst.Repo, inst.BaseCommit, repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})})
		if err != nil {
			b.Fatal(err)
		}
		defer idx.Close()
		insts = append(insts, prepared{inst, idx})
	}
	run := func(p prepared, sampleIdx int64, model agent.Model, onTurn func(schema.Turn)) schema.Trajectory {
		set, err := tools.New(p.idx, tools.Options{ProblemStatement: p.inst.ProblemStatement})
		if err != nil {
			b.Fatal(err)
		}
		job := schema.Job{JobID: p.inst.InstanceID, InstanceID: p.inst.InstanceID, ProblemStatement: p.inst.ProblemStatement, Sample: sampleIdx, Sampling: schema.Sampling{Seed: schema.SampleSeed(1, sampleIdx)}}
		tr, err := agent.Run(context.Background(), agent.Config{}, agent.Episode{Job: job, Tools: set, Graph: p.idx.Graph, Model: model, OnTurn: onTurn})
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	var recorded []schema.Trajectory
	for _, p := range insts {
		for s := range int64(4) {
			recorded = append(recorded, run(p, s, Heuristic{}, nil))
		}
	}
	replay := NewReplay(recorded)
	var overhead []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for _, p := range insts {
			for s := range int64(4) {
				last := time.Now()
				run(p, s, replay, func(t schema.Turn) {
					now := time.Now()
					overhead = append(overhead, now.Sub(last)-time.Duration(t.PolicyLatencyMS*float64(time.Millisecond)))
					last = now
				})
			}
		}
	}
	slices.Sort(overhead)
	pct := func(p float64) float64 {
		return float64(overhead[min(len(overhead)-1, int(p*float64(len(overhead))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "p50-ms/turn")
	b.ReportMetric(pct(0.99), "p99-ms/turn")
	b.ReportMetric(float64(len(overhead))/float64(b.N), "turns/op")
}

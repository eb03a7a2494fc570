package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/repoindex"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/coordinator/dataset"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/policy"
)

// BenchmarkTrainingBytes measures what a turn costs on disk: real
// heuristic episodes (8 samples per instance) on the built-in sample, or on
// A2FARM_BENCH_DATASET with its repositories in A2FARM_BENCH_REPOS,
// their archive (Arrow IPC, zstd) without and with token ids, and the
// message and token shards the learner writes from them. Token ids come
// from a toy chat template of about four bytes per token over the
// recorded requests and replies, as a server with return_token_ids
// would answer. Sizes are per 1,000 turns.
func BenchmarkTrainingBytes(b *testing.B) {
	dir := b.TempDir()
	datasetPath, reposDir := os.Getenv("A2FARM_BENCH_DATASET"), os.Getenv("A2FARM_BENCH_REPOS")
	if datasetPath == "" {
		l, err := sample.Write(filepath.Join(dir, "sample"))
		if err != nil {
			b.Fatal(err)
		}
		datasetPath, reposDir = l.Dataset, l.ReposDir
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	ds, err := dataset.Load(context.Background(), datasetPath, dataset.Options{Repos: repos})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := policy.NewRegistry(policy.RegistryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	spec := schema.RunSpec{Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Seed: 42,
		Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	res, err := worker.Localize(context.Background(), worker.LocalizeConfig{Instances: ds.Instances, Repos: repos,
		Spec: spec, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: reg, Samples: 8, Out: filepath.Join(dir, "loc"), Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	trs := res.Trajectories
	report, err := coordinator.RunGold(context.Background(), coordinator.GoldConfig{Dataset: datasetPath, ReposDir: reposDir,
		MaxEditFiles: gold.DefaultMaxEditFiles, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	goldByID := map[string]schema.Locations{}
	for _, r := range report.Rows {
		if r.Gold.FileChanges != nil {
			goldByID[r.Gold.InstanceID] = r.Gold.Locations()
		}
	}
	withIDs := make([]schema.Trajectory, len(trs))
	turns := 0
	for i, tr := range trs {
		turns += len(tr.Turns)
		withIDs[i] = attachTokenIDs(b, tr, policytest.Template{BytesPerToken: 4})
	}
	per1000 := func(n int64) float64 { return float64(n) * 1000 / float64(turns) }
	b.ResetTimer()
	for range b.N {
		b.ReportMetric(per1000(archiveBytes(b, trs)), "archive-B/1000turns")
		b.ReportMetric(per1000(archiveBytes(b, withIDs)), "archive+ids-B/1000turns")
		res, err := learner.Process(withIDs, goldByID, learner.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		out := filepath.Join(b.TempDir(), "shards")
		w, err := shard.NewWriter(shard.Config{Dir: out})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := learner.Write(w, res.Trajectories, true); err != nil {
			b.Fatal(err)
		}
		m, err := w.Close()
		if err != nil {
			b.Fatal(err)
		}
		var msgBytes, tokBytes int64
		for _, f := range m.Files {
			msgBytes += f.Bytes
		}
		for _, f := range m.TokenFiles {
			tokBytes += f.Bytes
		}
		b.ReportMetric(per1000(msgBytes), "shards-B/1000turns")
		b.ReportMetric(per1000(tokBytes), "tokens-B/1000turns")
		b.ReportMetric(float64(m.Tokens.Tokens)*1000/float64(turns), "ids/1000turns")
		b.ReportMetric(m.Tokens.MergeRate, "merge-rate")
	}
	b.ReportMetric(float64(turns), "turns")
}

// attachTokenIDs gives every turn the prompt and completion ids a server
// with the template would have returned.
func attachTokenIDs(b *testing.B, tr schema.Trajectory, tmpl policytest.Template) schema.Trajectory {
	reqs, err := tr.Requests()
	if err != nil {
		b.Fatal(err)
	}
	tr.Turns = append([]schema.Turn(nil), tr.Turns...)
	var base []int32
	for i := range tr.Turns {
		t := &tr.Turns[i]
		prompt := tmpl.Prompt(reqs[i])
		t.TokenIDs = tmpl.Completion(policytest.Reply{Content: t.AssistantContent, Reasoning: t.Reasoning, ToolCalls: t.ToolCalls})
		t.PromptTokenKeep, t.PromptTokenIDs = schema.TokenDelta(base, prompt)
		base = append(prompt, t.TokenIDs...)
	}
	return tr
}

func archiveBytes(b *testing.B, trs []schema.Trajectory) int64 {
	rec := schema.EncodeTrajectories(nil, trs...)
	defer rec.Release()
	var buf bytes.Buffer
	if err := schema.WriteIPC(&buf, schema.TrajectorySchema(), rec); err != nil {
		b.Fatal(err)
	}
	return int64(buf.Len())
}

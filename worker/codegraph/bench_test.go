package codegraph

import (
	"context"
	"os"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
)

// benchSnapshot loads the snapshot named by A2FARM_BENCH_REPOS (a repos
// folder), A2FARM_BENCH_REPO (owner/name) and A2FARM_BENCH_COMMIT, or
// skips the benchmark.
func benchSnapshot(b *testing.B) (*gitrepo.Set, *gitrepo.Snapshot, string) {
	reposDir, repo, commit := os.Getenv("A2FARM_BENCH_REPOS"), os.Getenv("A2FARM_BENCH_REPO"), os.Getenv("A2FARM_BENCH_COMMIT")
	if reposDir == "" || repo == "" || commit == "" {
		b.Skip("set A2FARM_BENCH_REPOS, A2FARM_BENCH_REPO and A2FARM_BENCH_COMMIT to a real snapshot")
	}
	set := gitrepo.NewSet(reposDir)
	b.Cleanup(func() { set.Close() })
	snap, err := set.At(repo, commit)
	if err != nil {
		b.Fatal(err)
	}
	return set, snap, repo
}

// BenchmarkGraphBuild measures parse + graph construction from sources
// already in memory.
func BenchmarkGraphBuild(b *testing.B) {
	_, snap, repo := benchSnapshot(b)
	src, err := LoadSnapshot(context.Background(), lang.NewSet(python.Language{}), repo, snap)
	if err != nil {
		b.Fatal(err)
	}
	var nodes, edges int
	for b.Loop() {
		parsed, err := ParseAll(context.Background(), lang.NewSet(python.Language{}), src.Files)
		if err != nil {
			b.Fatal(err)
		}
		g := BuildGraph(lang.NewSet(python.Language{}), src, parsed)
		nodes, edges = len(g.Nodes), len(g.Edges)
	}
	b.ReportMetric(float64(nodes), "nodes")
	b.ReportMetric(float64(edges), "edges")
}

// BenchmarkGraphFromGit adds reading the snapshot from git objects.
func BenchmarkGraphFromGit(b *testing.B) {
	_, snap, repo := benchSnapshot(b)
	for b.Loop() {
		src, err := LoadSnapshot(context.Background(), lang.NewSet(python.Language{}), repo, snap)
		if err != nil {
			b.Fatal(err)
		}
		parsed, err := ParseAll(context.Background(), lang.NewSet(python.Language{}), src.Files)
		if err != nil {
			b.Fatal(err)
		}
		BuildGraph(lang.NewSet(python.Language{}), src, parsed)
	}
}

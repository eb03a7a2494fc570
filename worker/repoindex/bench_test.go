package repoindex

import (
	"context"
	"os"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
)

// BenchmarkColdBuild builds one real snapshot into a fresh cache per
// iteration (A2FARM_BENCH_REPOS, A2FARM_BENCH_REPO, A2FARM_BENCH_COMMIT),
// for -memprofile and -cpuprofile; docs/BENCHMARKS.md has the figures.
func BenchmarkColdBuild(b *testing.B) {
	reposDir, repo, commit := os.Getenv("A2FARM_BENCH_REPOS"), os.Getenv("A2FARM_BENCH_REPO"), os.Getenv("A2FARM_BENCH_COMMIT")
	if reposDir == "" || repo == "" || commit == "" {
		b.Skip("set A2FARM_BENCH_REPOS, A2FARM_BENCH_REPO and A2FARM_BENCH_COMMIT")
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	for b.Loop() {
		cache, err := OpenCache(b.TempDir(), 0)
		if err != nil {
			b.Fatal(err)
		}
		idx, err := Build(context.Background(), repos, repo, commit, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache})
		if err != nil {
			b.Fatal(err)
		}
		idx.Close()
	}
}

package tools

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// BenchmarkToolLatency calls each tool with representative arguments on a
// warm index of the snapshot named by A2FARM_BENCH_REPOS, A2FARM_BENCH_REPO
// and A2FARM_BENCH_COMMIT, and reports p50 and p99 latency per tool.
// A2FARM_BENCH_TOOLARGS may hold a JSON object {tool: [args, ...]}.
func BenchmarkToolLatency(b *testing.B) {
	reposDir, repo, commit := os.Getenv("A2FARM_BENCH_REPOS"), os.Getenv("A2FARM_BENCH_REPO"), os.Getenv("A2FARM_BENCH_COMMIT")
	if reposDir == "" || repo == "" || commit == "" {
		b.Skip("set A2FARM_BENCH_REPOS, A2FARM_BENCH_REPO and A2FARM_BENCH_COMMIT")
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	idx, err := repoindex.Build(context.Background(), repos, repo, commit, repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})})
	if err != nil {
		b.Fatal(err)
	}
	defer idx.Close()
	set, err := New(idx, Options{})
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string][]string{}
	if raw := os.Getenv("A2FARM_BENCH_TOOLARGS"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &calls); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{SearchCodeSnippets, GetEntityContents, ExploreTreeStructure, SearchCommit, ViewSummary, SearchSummary} {
		args := calls[name]
		if len(args) == 0 {
			continue
		}
		b.Run(name, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			for b.Loop() {
				start := time.Now()
				set.Call(context.Background(), name, json.RawMessage(args[i%len(args)]))
				lat = append(lat, time.Since(start))
				i++
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}

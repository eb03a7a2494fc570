package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// BenchmarkCachedToolCall is one `a2farm tool` call on a snapshot already
// in the cache, named by its full id, as a worker's every episode but the
// first opens it: flags, cache entry, tools, one search. It reports the
// git objects read per call, which must stay 0 — reading even one loads a
// big repository's pack index (ansible: 0.09 s and 120 MB per call became
// 0.43 s and 239 MB when one commit object was read for a log line).
func BenchmarkCachedToolCall(b *testing.B) {
	reposDir, commit := sampleSnapshot(b)
	cache := filepath.Join(b.TempDir(), "cache")
	args := []string{"tool", "--repos", reposDir, "--repo", "acme/inventory", "--commit", commit,
		"--cache", cache, "--name", "search_code_snippets",
		"--args", `{"search_terms": ["warehouse stock"]}`}
	if code, _, errOut := run(b, args...); code != 0 { // builds the entry
		b.Fatalf("tool: %s", errOut)
	}
	b.ReportAllocs()
	for b.Loop() {
		if code, _, errOut := run(b, args...); code != 0 {
			b.Fatalf("tool: %s", errOut)
		}
	}
	// The same open once more, through a set this benchmark holds, to
	// count what a call reads from git.
	e := &env{stdout: io.Discard, stderr: io.Discard, languages: languages()}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	idx, err := buildIndex(context.Background(), e, repos,
		snapshotFlags{repos: reposDir, repo: "acme/inventory", commit: commit}, cacheFlags{dir: cache, engine: repoindex.DefaultEngine})
	if err != nil {
		b.Fatal(err)
	}
	idx.Close()
	b.ReportMetric(float64(repos.ObjectsRead()), "git-objects/op")
}

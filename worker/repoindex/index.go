package repoindex

import (
	"context"
	"fmt"
	"time"

	"github.com/a2farm/a2farm/internal/gitrepo"
)

// Index holds every index of one snapshot.
type Index struct {
	Repo   string
	Commit string
	Graph  *Graph
	// Commits is the history up to the snapshot's commit.
	Commits *CommitIndex
	// Summaries describe each non-test file.
	Summaries *Summaries
	// Timings says how long each part took to build.
	Timings []Timing
}

// Timing is the build time of one index part.
type Timing struct {
	Part     string
	Duration time.Duration
}

// BuildOptions tune index construction.
type BuildOptions struct {
	// Summaries is a prebuilt {file_path: summary} table; nil uses
	// structural summaries only.
	Summaries map[string]string
}

// Build reads the snapshot of repo at commit from repos and builds its
// indexes.
func Build(ctx context.Context, repos *gitrepo.Set, repo, commit string, opts BuildOptions) (*Index, error) {
	snap, err := repos.At(repo, commit)
	if err != nil {
		return nil, err
	}
	idx := &Index{Repo: repo, Commit: snap.Commit()}
	start := time.Now()
	src, err := LoadSnapshot(ctx, repo, snap)
	if err != nil {
		return nil, fmt.Errorf("load %s@%s: %w", repo, commit, err)
	}
	idx.Timings = append(idx.Timings, Timing{"read", time.Since(start)})
	start = time.Now()
	parsed, err := ParseAll(ctx, src.Files)
	if err != nil {
		return nil, err
	}
	idx.Timings = append(idx.Timings, Timing{"parse", time.Since(start)})
	start = time.Now()
	idx.Graph = BuildGraph(src.Files, parsed)
	idx.Timings = append(idx.Timings, Timing{"graph", time.Since(start)})
	start = time.Now()
	if idx.Commits, err = BuildCommitIndex(ctx, snap.Repo(), idx.Commit); err != nil {
		return nil, fmt.Errorf("commit index of %s@%s: %w", repo, commit, err)
	}
	idx.Timings = append(idx.Timings, Timing{"commits", time.Since(start)})
	start = time.Now()
	idx.Summaries = BuildSummaries(idx.Graph, idx.Commits, opts.Summaries)
	idx.Timings = append(idx.Timings, Timing{"summary", time.Since(start)})
	return idx, nil
}

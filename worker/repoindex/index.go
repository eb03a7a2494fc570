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
	// Timings says how long each part took to build.
	Timings []Timing
}

// Timing is the build time of one index part.
type Timing struct {
	Part     string
	Duration time.Duration
}

// Build reads the snapshot of repo at commit from repos and builds its
// indexes.
func Build(ctx context.Context, repos *gitrepo.Set, repo, commit string) (*Index, error) {
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
	return idx, nil
}

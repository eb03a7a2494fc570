package repoindex

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	// Chunks is the BM25 index over code chunks; Nodes over node ids.
	Chunks *ChunkIndex
	Nodes  *NodeSearch
	// Engine ranks Chunks: EngineBleve or EngineBM25.
	Engine string
	// cleanup removes what Build created on disk.
	cleanup func() error
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
	// Engine ranks code chunks: EngineBleve (default) or EngineBM25.
	Engine string
	// Dir holds on-disk parts (the bleve index); "" uses a temporary
	// folder removed by Close.
	Dir string
}

// DefaultEngine is the chunk ranking used when none is chosen: bleve's
// bm25 ties textbook BM25 on file recall@10 over the dev instances and
// ranks the first gold file higher (MRR 0.394 vs 0.344; docs/BENCHMARKS.md).
const DefaultEngine = EngineBleve

// Close releases the index's files.
func (idx *Index) Close() error {
	var err error
	if idx.Chunks != nil {
		err = idx.Chunks.Close()
	}
	if idx.cleanup != nil {
		if cerr := idx.cleanup(); err == nil {
			err = cerr
		}
	}
	return err
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

	start = time.Now()
	idx.Nodes = BuildNodeSearch(idx.Graph)
	idx.Chunks = BuildChunkIndex(src.Files, parsed)
	idx.Timings = append(idx.Timings, Timing{"bm25", time.Since(start)})
	idx.Engine = opts.Engine
	if idx.Engine == "" {
		idx.Engine = DefaultEngine
	}
	switch idx.Engine {
	case EngineBM25:
	case EngineBleve:
		start = time.Now()
		dir := opts.Dir
		if dir == "" {
			tmp, err := os.MkdirTemp("", "a2farm-index-*")
			if err != nil {
				return nil, err
			}
			idx.cleanup = func() error { return os.RemoveAll(tmp) }
			dir = tmp
		}
		if err := idx.Chunks.BuildBleve(filepath.Join(dir, "chunks.bleve")); err != nil {
			idx.Close()
			return nil, err
		}
		idx.Timings = append(idx.Timings, Timing{"bleve", time.Since(start)})
	default:
		return nil, fmt.Errorf("unknown search engine %q (want %s or %s)", idx.Engine, EngineBleve, EngineBM25)
	}
	return idx, nil
}

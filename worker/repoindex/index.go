package repoindex

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codesearch"
	"github.com/a2farm/a2farm/worker/history"
	"github.com/a2farm/a2farm/worker/summary"
)

// Version is the on-disk format version of cached indexes; bump it when
// a change makes cached parts unreadable or stale.
const Version = 3

// Index holds every index of one snapshot.
type Index struct {
	Repo   string
	Commit string
	Graph  *codegraph.Graph
	// Commits is the history up to the snapshot's commit.
	Commits *history.CommitIndex
	// History says what deriving Commits from the repository's commit
	// store cost: commits read from git and diffed (0 when stored).
	History history.ViewStats
	// Summaries describe each non-test file.
	Summaries *summary.Summaries
	// Chunks is the BM25 index over code chunks; Nodes over node ids.
	Chunks *codesearch.ChunkIndex
	Nodes  *codesearch.NodeSearch
	// Engine ranks Chunks: codesearch.EngineBleve or codesearch.EngineBM25.
	Engine string
	// Cached is true when the index was loaded from the cache; Fetched
	// when that entry came from the farm's shared store.
	Cached, Fetched bool
	// ShareErr says why a freshly built index could not be stored for
	// the farm's other workers (nil when it was, or when none is shared).
	ShareErr error
	// Timings says how long each part took to build or load.
	Timings []Timing
	// release frees what the index holds on disk (temporary folder,
	// cache lock).
	release []func() error
	// blobs are the snapshot's source blobs, whose parse results a
	// shared bundle carries.
	blobs []parsedBlob
	// parseStored waits for a build's new parse results to reach the
	// cache (nil for an opened index).
	parseStored func() error
}

// Timing is the build time of one index part.
type Timing struct {
	Part     string
	Duration time.Duration
}

// BuildOptions tune index construction.
type BuildOptions struct {
	// Languages read the snapshot's files, each by its own (required).
	Languages *lang.Set
	// Summaries is a prebuilt {file_path: summary} table; nil uses
	// structural summaries only.
	Summaries map[string]string
	// Engine ranks code chunks: codesearch.EngineBleve (default) or codesearch.EngineBM25.
	Engine string
	// Cache, when set, keeps indexes on disk across runs and processes.
	Cache *Cache
	// Shared, when set (with a Cache), shares built indexes across the
	// farm: a snapshot is built by one worker and fetched by the rest.
	Shared Shared
}

// For returns the options that read a snapshot with the named languages
// of o.Languages (an instance's, schema.Instance.Languages); no names
// keep them all. The cache keys name the languages, so a snapshot read
// with two sets is two entries.
func (o BuildOptions) For(languages []string) (BuildOptions, error) {
	set, err := o.Languages.Select(languages)
	if err != nil {
		return o, err
	}
	o.Languages = set
	return o, nil
}

// DefaultEngine is the chunk ranking used when none is chosen: bleve's
// bm25 ties textbook BM25 on file recall@10 over the dev instances and
// ranks the first gold file higher (MRR 0.394 vs 0.344; docs/BENCHMARKS.md).
const DefaultEngine = codesearch.EngineBleve

// Close releases the index's files and locks.
func (idx *Index) Close() error {
	var first error
	for i := len(idx.release) - 1; i >= 0; i-- {
		if err := idx.release[i](); first == nil {
			first = err
		}
	}
	idx.release = nil
	return first
}

// Where an index came from (Index.Source).
const (
	SourceBuilt  = "built"
	SourceCache  = "cache"
	SourceShared = "shared"
)

// Source says where the index came from: built here, loaded from the
// host's cache, or fetched from the farm's shared store.
func (idx *Index) Source() string {
	switch {
	case idx.Fetched:
		return SourceShared
	case idx.Cached:
		return SourceCache
	}
	return SourceBuilt
}

func (idx *Index) timed(part string, start time.Time) {
	idx.Timings = append(idx.Timings, Timing{part, time.Since(start)})
}

// Build returns the indexes of repo at commit: the cache entry opened
// (opts.Cache, or a temporary cache of the index's own), made first —
// fetched from the farm (opts.Shared) or built from repos — when it is
// missing.
func Build(ctx context.Context, repos *gitrepo.Set, repo, commit string, opts BuildOptions) (*Index, error) {
	if opts.Engine == "" {
		opts.Engine = DefaultEngine
	}
	if opts.Languages.Len() == 0 {
		return nil, errors.New("index: no language to parse the snapshot with")
	}
	if opts.Shared != nil && opts.Cache == nil {
		return nil, errors.New("index: sharing indexes needs a cache folder to install them in")
	}
	if opts.Engine != codesearch.EngineBleve && opts.Engine != codesearch.EngineBM25 {
		return nil, fmt.Errorf("unknown search engine %q (want %s or %s)", opts.Engine, codesearch.EngineBleve, codesearch.EngineBM25)
	}
	r, err := repos.Repo(repo)
	if err != nil {
		return nil, err
	}
	if commit, err = resolve(r, repo, commit, opts); err != nil {
		return nil, err
	}
	if opts.Cache != nil {
		return opts.Cache.index(ctx, r, repo, commit, opts)
	}
	// Without a cache the index goes the same way through a cache of its
	// own, removed when the index is closed.
	tmp, err := os.MkdirTemp("", "a2farm-index-*")
	if err != nil {
		return nil, err
	}
	c, err := OpenCache(tmp, 0)
	if err == nil {
		var idx *Index
		if idx, err = c.index(ctx, r, repo, commit, opts); err == nil {
			idx.release = append(idx.release, func() error { return os.RemoveAll(tmp) })
			return idx, nil
		}
	}
	os.RemoveAll(tmp)
	return nil, err
}

// resolve turns a revision into a full commit id. A full id opens a cached
// entry without reading any git object (a big repository's pack index alone
// costs seconds and 100+ MB), and so does an abbreviated one that names a
// single object of the repository whose entry the cache holds: entries are
// made for commits only, so that object is the commit go-git's resolution
// would answer (hash prefixes first, then references).
func resolve(r *gitrepo.Repo, repo, rev string, opts BuildOptions) (string, error) {
	if opts.Cache != nil && len(rev) < 40 {
		if ids, err := r.ObjectsWithPrefix(rev); err == nil && len(ids) == 1 &&
			opts.Cache.complete(opts.Cache.snapshotDir(repo, ids[0]), opts) {
			return ids[0], nil
		}
	}
	return r.Resolve(rev)
}

// build makes every part of the index in memory; parse results are reused
// from the cache by blob.
//
// On a base (not nil) it reads from git only the files the base lacks,
// and chunks only those: the index is then the material of an overlay on
// that base (writeOverlay), not a whole one.
func build(ctx context.Context, snap *gitrepo.Snapshot, repo string, opts BuildOptions, c *Cache, base *baseParts) (*Index, error) {
	idx, src, parsed, err := c.assemble(ctx, snap, repo, opts, base)
	if err != nil {
		return nil, err
	}
	if base == nil {
		idx.chunk(opts, src.Files, parsed)
		return idx, nil
	}
	var own []codegraph.SourceFile
	var ownParsed []*lang.File
	for i, f := range src.Files {
		if _, ok := base.has(f); !ok {
			own, ownParsed = append(own, f), append(ownParsed, parsed[i])
		}
	}
	idx.chunk(opts, own, ownParsed)
	return idx, nil
}

// assemble runs the two independent parts every index needs side by side:
// the snapshot's history (mostly waiting on git objects, one core) and its
// sources, parse and graph (every core).
func (c *Cache) assemble(ctx context.Context, snap *gitrepo.Snapshot, repo string, opts BuildOptions, base *baseParts) (*Index, *codegraph.Snapshot, []*lang.File, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := c.historyAsync(ctx, snap.Repo(), repo, snap.Commit(), opts)
	idx, src, parsed, err := c.prepare(ctx, snap, repo, opts, base)
	if err != nil {
		cancel()
		wait(idx)
		return nil, nil, nil, err
	}
	if err := wait(idx); err != nil {
		return nil, nil, nil, err
	}
	return idx, src, parsed, nil
}

// historyAsync derives a snapshot's history in the background; wait puts
// it into idx (nil: only waits) and returns its error.
func (c *Cache) historyAsync(ctx context.Context, r *gitrepo.Repo, repo, commit string, opts BuildOptions) (wait func(idx *Index) error) {
	type result struct {
		index *history.CommitIndex
		stats history.ViewStats
		took  time.Duration
		err   error
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		ci, st, err := c.commits(ctx, r, repo, commit, opts)
		done <- result{ci, st, time.Since(start), err}
	}()
	return func(idx *Index) error {
		h := <-done
		if h.err == nil && idx != nil {
			idx.Commits, idx.History = h.index, h.stats
			idx.Timings = append(idx.Timings, Timing{"commits", h.took})
		}
		return h.err
	}
}

// prepare reads the snapshot's sources, parses them (through the blob
// cache when c is set) and builds the graph: the steps every index needs.
func (c *Cache) prepare(ctx context.Context, snap *gitrepo.Snapshot, repo string, opts BuildOptions, base *baseParts) (*Index, *codegraph.Snapshot, []*lang.File, error) {
	idx := &Index{Repo: repo, Commit: snap.Commit(), Engine: opts.Engine}
	start := time.Now()
	var known codegraph.Known
	content := func(codegraph.SourceFile) ([]byte, error) { return nil, errors.New("no content") }
	if base != nil {
		known, content = base.known, base.content
	}
	src, err := codegraph.LoadSnapshotKnown(ctx, opts.Languages, repo, snap, known)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load %s@%s: %w", repo, snap.Commit(), err)
	}
	idx.timed("read", start)
	start = time.Now()
	parsed, stored, err := c.parseAll(ctx, opts.Languages, src.Files, content)
	if err != nil {
		return nil, nil, nil, err
	}
	idx.parseStored = stored
	idx.release = append(idx.release, stored)
	idx.timed("parse", start)
	for _, f := range src.Files {
		idx.blobs = append(idx.blobs, parsedBlob{readerKey(opts.Languages, f.Path), f.Blob})
	}
	start = time.Now()
	idx.Graph = codegraph.BuildGraph(opts.Languages, src, parsed)
	idx.timed("graph", start)
	return idx, src, parsed, nil
}

// chunk cuts the snapshot's files into the code chunks search ranks and
// indexes their texts. The parts derived from the graph alone (summaries,
// node search) are not built here: the entry does not hold them, and
// opening it derives them.
func (idx *Index) chunk(opts BuildOptions, files []codegraph.SourceFile, parsed []*lang.File) {
	start := time.Now()
	idx.Chunks = codesearch.BuildChunkIndex(opts.Languages, files, parsed)
	idx.timed("chunks", start)
}

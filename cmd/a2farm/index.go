package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codesearch"
	"github.com/a2farm/a2farm/worker/repoindex"
	"github.com/a2farm/a2farm/worker/summary"
)

func newIndexCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "index",
		Short: "Build and inspect the per-snapshot indexes the agent's tools use",
	}
	cmd.AddCommand(newIndexGraphCmd(e), newIndexBuildCmd(e), newIndexSearchEvalCmd(e), newIndexSummarizeCmd(e))
	return cmd
}

func newIndexBuildCmd(e *env) *cobra.Command {
	var sf snapshotFlags
	var cf cacheFlags
	cmd := &cobra.Command{
		Use:   "build --repos DIR --repo OWNER/NAME --commit SHA",
		Short: "Build every index of a snapshot and report what was built and how long each part took",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			repos := gitrepo.NewSet(sf.repos)
			defer repos.Close()
			idx, err := buildIndex(cmd.Context(), e, repos, sf, cf)
			if err != nil {
				return err
			}
			defer idx.Close()
			how := "built"
			if idx.Cached {
				how = "loaded from cache"
			}
			fmt.Fprintf(e.stdout, "%s@%s (%s)\n", idx.Repo, idx.Commit, how)
			fmt.Fprintf(e.stdout, "  graph    %d nodes, %d edges\n", len(idx.Graph.Nodes), len(idx.Graph.Edges))
			fmt.Fprintf(e.stdout, "  commits  %d (%d read from git, %d diffed; the rest from the repository's store)\n",
				len(idx.Commits.Commits), idx.History.FromGit, idx.History.Diffed)
			fmt.Fprintf(e.stdout, "  memory   ~%.1f MiB held open (estimate)\n", float64(idx.Bytes())/(1<<20))
			fmt.Fprintf(e.stdout, "  chunks   %d (%s)\n", len(idx.Chunks.Chunks), idx.Engine)
			for _, t := range idx.Timings {
				fmt.Fprintf(e.stdout, "  %-8s %s\n", t.Part, t.Duration.Round(time.Millisecond))
			}
			fmt.Fprintf(e.stdout, "  total    %s\n", time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	sf.bind(cmd)
	cf.bind(cmd)
	e.bindLanguages(cmd, false)
	return cmd
}

// snapshotFlags are the flags that name a repository snapshot.
type snapshotFlags struct {
	repos, repo, commit string
}

func (f *snapshotFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.repos, "repos", envOr("A2FARM_REPOS", ""), "folder of git repositories named owner__name (env A2FARM_REPOS)")
	cmd.Flags().StringVar(&f.repo, "repo", "", "repository as owner/name")
	cmd.Flags().StringVar(&f.commit, "commit", "", "commit id (full or abbreviated)")
}

// open validates the flags and opens the snapshot; the caller closes the
// repository set.
func (f *snapshotFlags) open() (*gitrepo.Set, *gitrepo.Snapshot, error) {
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	repos := gitrepo.NewSet(f.repos)
	snap, err := repos.At(f.repo, f.commit)
	if err != nil {
		repos.Close()
		return nil, nil, err
	}
	return repos, snap, nil
}

// buildIndex builds (or loads from the cache) the indexes of the snapshot
// the flags name, reading the repository through repos, which the commit
// tools read while the index is in use: the caller closes the index, then
// repos.
func buildIndex(ctx context.Context, e *env, repos *gitrepo.Set, sf snapshotFlags, cf cacheFlags) (*repoindex.Index, error) {
	if err := sf.validate(); err != nil {
		return nil, err
	}
	l, err := e.snapshotLanguages()
	if err != nil {
		return nil, err
	}
	opts, err := cf.options(l)
	if err != nil {
		return nil, err
	}
	idx, err := repoindex.Build(ctx, repos, sf.repo, sf.commit, opts)
	if err != nil {
		return nil, err
	}
	// Said when the index is built, never on a cached one: the note reads
	// the commit and walks its tree, and a cached index opened by its full
	// id reads no git object at all (opening the pack index of a big
	// repository costs more than the whole cached call).
	if !idx.Cached {
		if snap, err := repos.At(sf.repo, sf.commit); err == nil {
			e.noteUnread(snap, l)
		}
	}
	return idx, nil
}

func (f *snapshotFlags) validate() error {
	if err := required("repos", f.repos, "repo", f.repo, "commit", f.commit); err != nil {
		return err
	}
	return inputs("repos", f.repos)
}

func newIndexGraphCmd(e *env) *cobra.Command {
	var sf snapshotFlags
	cmd := &cobra.Command{
		Use:   "graph --repos DIR --repo OWNER/NAME --commit SHA",
		Short: "Print the code graph of a snapshot as JSON lines",
		Long: `graph builds the code graph of the repository at the commit (directory, file, class
and function nodes; contains, imports, invokes and inherits edges, as the reference
builder) and prints one {"node","type","start_line","end_line"} line per node, then
one {"src","dst","type"} line per edge. Parallel edges are kept.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := e.snapshotLanguages()
			if err != nil {
				return err
			}
			repos, snap, err := sf.open()
			if err != nil {
				return err
			}
			defer repos.Close()
			e.noteUnread(snap, l)
			start := time.Now()
			src, parsed, err := codegraph.ParseSnapshot(cmd.Context(), l, sf.repo, snap)
			if err != nil {
				return err
			}
			parse := time.Since(start)
			g := codegraph.BuildGraph(l, src, parsed)
			build := time.Since(start) - parse
			e.log.Info().Int("files", len(src.Files)).Int("skipped", len(src.Skipped)).
				Int("nodes", len(g.Nodes)).Int("edges", len(g.Edges)).
				Str("read", src.ReadTime.Round(time.Millisecond).String()).
				Str("read_and_parse", parse.Round(time.Millisecond).String()).
				Str("graph", build.Round(time.Millisecond).String()).
				Int("parsers", runtime.GOMAXPROCS(0)).
				Str("total", time.Since(start).Round(time.Millisecond).String()).Msg("graph built")
			if err := g.WriteJSONLines(e.stdout); err != nil {
				return fmt.Errorf("write graph: %w", err)
			}
			return nil
		},
	}
	sf.bind(cmd)
	e.bindLanguages(cmd, false)
	return cmd
}

// cacheFlags choose how indexes are built and where they are kept.
type cacheFlags struct {
	dir       string
	maxGiB    float64
	engine    string
	summaries string
}

func (c *cacheFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.dir, "cache", envOr("A2FARM_CACHE", ""), "index cache folder shared by processes on this host; empty builds in a temporary folder (env A2FARM_CACHE)")
	f.Float64Var(&c.maxGiB, "cache-max-gib", 20, "size bound of the index cache in GiB; least recently used snapshots are evicted (0: unbounded)")
	f.StringVar(&c.engine, "search-engine", repoindex.DefaultEngine, "code-chunk ranking: bleve (bm25 scoring) or bm25 (textbook Lucene BM25)")
	f.StringVar(&c.summaries, "summaries", "", "prebuilt {file_path: summary} JSON for view_summary/search_summary (default: structural summaries)")
}

func (c *cacheFlags) options(l *lang.Set) (repoindex.BuildOptions, error) {
	opts := repoindex.BuildOptions{Languages: l}
	if c.engine != codesearch.EngineBleve && c.engine != codesearch.EngineBM25 {
		return opts, usagef("--search-engine %q: want %s or %s", c.engine, codesearch.EngineBleve, codesearch.EngineBM25)
	}
	opts.Engine = c.engine
	if c.maxGiB < 0 {
		return opts, usagef("--cache-max-gib must be >= 0")
	}
	if c.dir != "" {
		cache, err := repoindex.OpenCache(c.dir, int64(c.maxGiB*(1<<30)))
		if err != nil {
			return opts, err
		}
		opts.Cache = cache
	}
	if c.summaries != "" {
		table, err := summary.LoadSummaryFile(c.summaries)
		if err != nil {
			return opts, err
		}
		opts.Summaries = table
	}
	return opts, nil
}

package repoindex

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
	"github.com/a2farm/a2farm/worker/codesearch"
	"github.com/a2farm/a2farm/worker/summary"
)

// twoCommits makes a repository with two commits differing in one file.
func twoCommits(t *testing.T) (repos *gitrepo.Set, first, second string) {
	t.Helper()
	reposDir := t.TempDir()
	r, err := repogen.Init(filepath.Join(reposDir, "o__r"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for k, v := range graphtest.Files {
		files[k] = v
	}
	if first, err = r.Commit("", repogen.Change{Message: "one", Write: files}); err != nil {
		t.Fatal(err)
	}
	if second, err = r.Commit(first, repogen.Change{Message: "two", Write: map[string]string{
		"pkg/base.py": graphtest.Files["pkg/base.py"] + "\n\nclass Extra(Base):\n    pass\n"}}); err != nil {
		t.Fatal(err)
	}
	repos = gitrepo.NewSet(reposDir)
	t.Cleanup(func() { repos.Close() })
	return repos, first, second
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func TestCacheReusesSnapshotsAndBlobs(t *testing.T) {
	repos, first, second := twoCommits(t)
	dir := t.TempDir()
	cache, err := OpenCache(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(commit string) *Index {
		t.Helper()
		idx, err := Build(ctx, repos, "o/r", commit, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	a := open(first)
	if a.Cached {
		t.Error("first build reported as cached")
	}
	nodes, edges, chunks := len(a.Graph.Nodes), len(a.Graph.Edges), len(a.Chunks.Chunks)
	a.Close()
	parsed := countFiles(t, filepath.Join(dir, fmt.Sprintf("v%d", Version), "parse"))

	b := open(first)
	if !b.Cached {
		t.Error("second open of the same snapshot rebuilt it")
	}
	if len(b.Graph.Nodes) != nodes || len(b.Graph.Edges) != edges || len(b.Chunks.Chunks) != chunks || len(b.Commits.Commits) != 1 {
		t.Errorf("cached index differs: %d/%d nodes, %d/%d edges, %d/%d chunks", len(b.Graph.Nodes), nodes, len(b.Graph.Edges), edges, len(b.Chunks.Chunks), chunks)
	}
	if hits, err := b.Chunks.Search(b.Engine, "cleanup", 3); err != nil || len(hits) == 0 {
		t.Errorf("search on the cached postings: %v, %v", hits, err)
	}
	b.Close()

	c := open(second)
	defer c.Close()
	if c.Cached {
		t.Error("a new commit was reported as cached")
	}
	if _, ok := c.Graph.Lookup("pkg/base.py:Extra"); !ok {
		t.Error("the new commit's class is missing")
	}
	// Only the changed file was parsed again.
	if n := countFiles(t, filepath.Join(dir, fmt.Sprintf("v%d", Version), "parse")); n != parsed+1 {
		t.Errorf("parse cache holds %d results, want %d (+1 changed blob)", n, parsed+1)
	}
}

func TestCacheConcurrentBuildsShareOneEntry(t *testing.T) {
	repos, first, _ := twoCommits(t)
	cache, err := OpenCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*Index, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Build(context.Background(), repos, "o/r", first, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache})
		}()
	}
	wg.Wait()
	built := 0
	for i, idx := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !idx.Cached {
			built++
		}
		defer idx.Close()
	}
	if built != 1 {
		t.Errorf("%d of 4 concurrent opens built the snapshot, want exactly 1", built)
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	repos, first, second := twoCommits(t)
	dir := t.TempDir()
	cache, err := OpenCache(dir, 1) // any entry is over the bound
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := Build(ctx, repos, "o/r", first, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := Build(ctx, repos, "o/r", second, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cache.snapshotDir("o/r", first)); !os.IsNotExist(err) {
		t.Errorf("the unused older snapshot was kept (stat err %v)", err)
	}
	// b is open: building another entry must not evict it.
	c, err := Build(ctx, repos, "o/r", first, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := os.Stat(cache.snapshotDir("o/r", second)); err != nil {
		t.Errorf("an open snapshot was evicted: %v", err)
	}
	if hits, err := b.Chunks.Search(b.Engine, "Extra Base", 3); err != nil || len(hits) == 0 {
		t.Errorf("open index unusable after eviction pass: %v, %v", hits, err)
	}
	b.Close()
}

// TestOpenedIndexEqualsBuilt: an entry opened from the cache (graph read
// in one pass, contents, parse results and chunk texts on demand) answers
// like the index built in memory: the same graph, every node's code and
// skeleton, every chunk's text and search hits, the same summaries and
// history — also after the parse cache is gone (a fetched entry), when
// skeletons parse the file again.
func TestOpenedIndexEqualsBuilt(t *testing.T) {
	repos, first, _ := twoCommits(t)
	dir := t.TempDir()
	cache, err := OpenCache(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts := BuildOptions{Languages: lang.NewSet(python.Language{}), Engine: DefaultEngine, Cache: cache}
	// The index a build makes in memory, which no caller sees.
	snap, err := repos.At("o/r", first)
	if err != nil {
		t.Fatal(err)
	}
	built, err := build(context.Background(), snap, "o/r", opts, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer built.Close()
	if idx, err := Build(context.Background(), repos, "o/r", first, opts); err != nil {
		t.Fatal(err)
	} else {
		if idx.Cached || idx.Source() != SourceBuilt {
			t.Errorf("the first open says it came from %s", idx.Source())
		}
		idx.Close()
	}
	check := func(label string) {
		t.Helper()
		opened, err := Build(context.Background(), repos, "o/r", first, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer opened.Close()
		if !opened.Cached {
			t.Fatalf("%s: the entry was built again", label)
		}
		var a, b bytes.Buffer
		built.Graph.WriteJSONLines(&a)
		opened.Graph.WriteJSONLines(&b)
		if a.String() != b.String() {
			t.Errorf("%s: the opened graph differs from the built one", label)
		}
		for i := range built.Graph.Nodes {
			n := codegraph.NodeID(i)
			if got, want := opened.Graph.Code(n), built.Graph.Code(n); got != want {
				t.Errorf("%s: code of %s: %q, want %q", label, built.Graph.Nodes[i].ID, got, want)
			}
			if got, want := opened.Graph.Skeleton(n), built.Graph.Skeleton(n); got != want {
				t.Errorf("%s: skeleton of %s differs", label, built.Graph.Nodes[i].ID)
			}
		}
		for i := range built.Chunks.Chunks {
			if got, want := opened.Chunks.Text(i), built.Chunks.Text(i); got != want {
				t.Errorf("%s: chunk %d text %q, want %q", label, i, got, want)
			}
		}
		for _, engine := range []string{codesearch.EngineBleve, codesearch.EngineBM25} { // both rank the entry's postings
			for _, q := range []string{"cleanup", "engine run", "slug helpers"} {
				got, err1 := opened.Chunks.Search(engine, q, 5)
				want, err2 := built.Chunks.Search(engine, q, 5)
				if err1 != nil || err2 != nil || len(want) == 0 || !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s search %q: %v (%v), want %v (%v)", label, engine, q, got, err1, want, err2)
				}
			}
		}
		if want := summary.BuildSummaries(built.Graph, built.Commits, nil); !reflect.DeepEqual(opened.Summaries.Text, want.Text) {
			t.Errorf("%s: summaries differ", label)
		}
		if !reflect.DeepEqual(opened.Commits.Commits, built.Commits.Commits) {
			t.Errorf("%s: history differs", label)
		}
	}
	check("opened")
	if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("v%d", Version), "parse")); err != nil {
		t.Fatal(err)
	}
	check("opened without parse results")
}

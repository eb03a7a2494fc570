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

// TestCacheEvictsLeastRecentlyUsed: past its bound the cache removes the
// entries no open index uses, least recently used first; an overlay goes
// before its base, and a base stays while an overlay stored on it does.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	reposDir := t.TempDir()
	commits := map[string]string{}
	for _, name := range []string{"o__r", "o__s"} { // two repositories: neither is the other's base
		r, err := repogen.Init(filepath.Join(reposDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if commits[name], err = r.Commit("", repogen.Change{Message: "one", Write: graphtest.Files}); err != nil {
			t.Fatal(err)
		}
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	cache, err := OpenCache(t.TempDir(), 1) // any entry is over the bound
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache}
	a, err := Build(ctx, repos, "o/r", commits["o__r"], opts)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := Build(ctx, repos, "o/s", commits["o__s"], opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cache.snapshotDir("o/r", commits["o__r"])); !os.IsNotExist(err) {
		t.Errorf("the unused older snapshot was kept (stat err %v)", err)
	}
	// b is open: building another entry must not evict it.
	c, err := Build(ctx, repos, "o/r", commits["o__r"], opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := os.Stat(cache.snapshotDir("o/s", commits["o__s"])); err != nil {
		t.Errorf("an open snapshot was evicted: %v", err)
	}
	if hits, err := b.Chunks.Search(b.Engine, "Extra Base", 3); err != nil || len(hits) == 0 {
		t.Errorf("open index unusable after eviction pass: %v, %v", hits, err)
	}
	b.Close()
}

// TestABaseStaysWhileItsOverlayDoes: the second commit is stored as an
// overlay on the first; over the bound, the first (not open) stays while
// the overlay exists, and once the overlay is evicted the base goes too.
func TestABaseStaysWhileItsOverlayDoes(t *testing.T) {
	repos, first, second := twoCommits(t)
	cache, err := OpenCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache}
	for _, commit := range []string{first, second} {
		idx, err := Build(ctx, repos, "o/r", commit, opts)
		if err != nil {
			t.Fatal(err)
		}
		idx.Close()
	}
	meta, err := readMeta(cache.snapshotDir("o/r", second))
	if err != nil || meta.Base != first {
		t.Fatalf("the second commit's entry: %+v, %v; want an overlay on the first", meta, err)
	}
	cache.maxBytes = 1
	cache.evict("")
	for _, commit := range []string{first, second} {
		if _, err := os.Stat(cache.snapshotDir("o/r", commit)); !os.IsNotExist(err) {
			t.Errorf("%s kept after eviction with nothing open: %v", commit, err)
		}
	}
	for _, commit := range []string{first, second} {
		idx, err := Build(ctx, repos, "o/r", commit, opts)
		if err != nil {
			t.Fatal(err)
		}
		idx.Close()
	}
	overlay, err := Build(ctx, repos, "o/r", second, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer overlay.Close()
	cache.evict("")
	for _, commit := range []string{first, second} {
		if _, err := os.Stat(cache.snapshotDir("o/r", commit)); err != nil {
			t.Errorf("%s evicted while the overlay on it is open: %v", commit, err)
		}
	}
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
	built, err := build(context.Background(), snap, "o/r", opts, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer built.Close()
	// What opening derives from the graph, a build leaves to the open.
	built.Summaries = summary.BuildSummaries(built.Graph, built.Commits, nil)
	built.Nodes = codesearch.BuildNodeSearch(built.Graph)
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
		sameAnswers(t, label, opened, built)
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

// sameAnswers checks that got answers as want does: the same graph, every
// node's code and skeleton, every chunk's text, search hits of both
// engines, node search and summaries.
func sameAnswers(t *testing.T, label string, got, want *Index) {
	t.Helper()
	var a, b bytes.Buffer
	want.Graph.WriteJSONLines(&a)
	got.Graph.WriteJSONLines(&b)
	if a.String() != b.String() {
		t.Errorf("%s: the graph differs", label)
	}
	for i := range want.Graph.Nodes {
		n := codegraph.NodeID(i)
		if g, w := got.Graph.Code(n), want.Graph.Code(n); g != w {
			t.Errorf("%s: code of %s: %q, want %q", label, want.Graph.Nodes[i].ID, g, w)
		}
		if g, w := got.Graph.Skeleton(n), want.Graph.Skeleton(n); g != w {
			t.Errorf("%s: skeleton of %s differs", label, want.Graph.Nodes[i].ID)
		}
	}
	if !reflect.DeepEqual(got.Chunks.Chunks, want.Chunks.Chunks) {
		t.Errorf("%s: chunks %v, want %v", label, got.Chunks.Chunks, want.Chunks.Chunks)
	}
	for i := range want.Chunks.Chunks {
		if g, w := got.Chunks.Text(i), want.Chunks.Text(i); g != w {
			t.Errorf("%s: chunk %d text %q, want %q", label, i, g, w)
		}
	}
	for _, engine := range []string{codesearch.EngineBleve, codesearch.EngineBM25} { // both rank the entry's postings
		for _, q := range []string{"cleanup", "engine run", "slug helpers", "Extra Base", "def return self", "helper other extra turbo"} {
			g, err1 := got.Chunks.Search(engine, q, 50)
			w, err2 := want.Chunks.Search(engine, q, 50)
			if err1 != nil || err2 != nil || !reflect.DeepEqual(g, w) {
				t.Errorf("%s: %s search %q: %v (%v), want %v (%v)", label, engine, q, g, err1, w, err2)
			}
		}
	}
	for _, q := range []string{"Engine run", "helper", "util"} {
		if g, w := got.Nodes.Search(q, 10), want.Nodes.Search(q, 10); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: node search %q: %v, want %v", label, q, g, w)
		}
	}
	if !reflect.DeepEqual(got.Summaries.Text, want.Summaries.Text) {
		t.Errorf("%s: summaries differ", label)
	}
}

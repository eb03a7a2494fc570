package repoindex

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
)

// hosts are workers on separate machines: each its own cache folder, all
// one farm's shared index store (a real JetStream).
func hosts(t *testing.T, n int) (*bus.Bus, []BuildOptions) {
	t.Helper()
	_, js := natstest.New(t)
	b, err := bus.Open(context.Background(), js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out []BuildOptions
	for i := range n {
		cache, err := OpenCache(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		shared, ok := b.SharedIndexes("host-" + string(rune('a'+i)))
		if !ok {
			t.Fatal("the farm has no shared index store")
		}
		out = append(out, BuildOptions{Languages: lang.NewSet(python.Language{}), Cache: cache, Shared: shared})
	}
	return b, out
}

// TestSharedIndexIsBuiltOnceAcrossHosts: four hosts open the same snapshot
// at once; one builds it, the others fetch its bundle, and every copy is
// the same index.
func TestSharedIndexIsBuiltOnceAcrossHosts(t *testing.T) {
	repos, first, _ := twoCommits(t)
	_, opts := hosts(t, 4)
	results := make([]*Index, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Build(context.Background(), repos, "o/r", first, opts[i])
		}()
	}
	wg.Wait()
	built, fetched := 0, 0
	for i, idx := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer idx.Close()
		switch {
		case idx.Fetched:
			fetched++
		case !idx.Cached:
			built++
			if idx.ShareErr != nil {
				t.Errorf("the builder could not share: %v", idx.ShareErr)
			}
		}
	}
	if built != 1 || fetched != 3 {
		t.Fatalf("%d built and %d fetched, want 1 and 3", built, fetched)
	}
	for _, idx := range results {
		if idx.Fetched && idx.History.FromGit+idx.History.Diffed != 0 {
			t.Errorf("a fetched index read %d commits from git and diffed %d: the builder's shared history was not used",
				idx.History.FromGit, idx.History.Diffed)
		}
	}
	want := results[0]
	for _, idx := range results[1:] {
		if len(idx.Graph.Nodes) != len(want.Graph.Nodes) || len(idx.Graph.Edges) != len(want.Graph.Edges) ||
			len(idx.Chunks.Chunks) != len(want.Chunks.Chunks) || len(idx.Commits.Commits) != len(want.Commits.Commits) {
			t.Errorf("a copy differs: %d/%d nodes, %d/%d edges, %d/%d chunks", len(idx.Graph.Nodes), len(want.Graph.Nodes),
				len(idx.Graph.Edges), len(want.Graph.Edges), len(idx.Chunks.Chunks), len(want.Chunks.Chunks))
		}
		if hits, err := idx.Chunks.Search(idx.Engine, "cleanup", 3); err != nil || len(hits) == 0 {
			t.Errorf("search on a fetched index: %v, %v", hits, err)
		}
	}
}

// TestSharedIndexBuilderDies: while another holds the claim, a worker
// waits rather than build; when the claim lapses (its holder died without
// storing a bundle), the waiter builds and shares.
func TestSharedIndexBuilderDies(t *testing.T) {
	repos, first, _ := twoCommits(t)
	b, opts := hosts(t, 1)
	key := sharedKey("o/r", first, BuildOptions{Languages: lang.NewSet(python.Language{}), Engine: DefaultEngine})
	dead, _ := b.SharedIndexes("dead-host")
	held, _, err := dead.Claim(context.Background(), key) // never released: its holder "dies"
	if err != nil || !held {
		t.Fatalf("claim: %v %v", held, err)
	}
	done := make(chan *Index, 1)
	go func() {
		idx, err := Build(context.Background(), repos, "o/r", first, opts[0])
		if err != nil {
			t.Error(err)
		}
		done <- idx
	}()
	select {
	case <-done:
		t.Fatal("the waiter built while another worker held the claim")
	case <-time.After(3 * sharedPoll):
	}
	// The lease lapses: what the bucket's TTL does after IndexClaimTTL.
	keys, err := b.IndexBuilds.Keys(context.Background())
	if err != nil || len(keys) != 1 {
		t.Fatalf("claims: %v %v", keys, err)
	}
	if err := b.IndexBuilds.Purge(context.Background(), keys[0]); err != nil {
		t.Fatal(err)
	}
	idx := <-done
	if idx == nil {
		return
	}
	defer idx.Close()
	if idx.Cached || idx.ShareErr != nil {
		t.Errorf("the waiter did not build and share: cached %v, share error %v", idx.Cached, idx.ShareErr)
	}
	checkfor.Within(t, 5*time.Second, 50*time.Millisecond, func() error {
		var buf bytes.Buffer
		shared, _ := b.SharedIndexes("reader")
		if found, err := shared.Get(context.Background(), key, &buf); err != nil || !found || buf.Len() == 0 {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("the bundle is not stored yet")

// TestBundleRefusesEscapingNames: a bundle cannot write outside the cache.
func TestBundleRefusesEscapingNames(t *testing.T) {
	cache, err := OpenCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"entry/../../x", "parse/../../x.gob", "/etc/passwd", "other/x", "parse/a/b.gob"} {
		if err := cache.unbundle(&tar.Header{Name: name, Typeflag: tar.TypeReg}, bytes.NewReader(nil), t.TempDir()); err == nil {
			t.Errorf("member %q was accepted", name)
		}
	}
}

// TestAnOverlayIsSharedAsItsOwnBytes: host a builds the first commit (a
// whole entry, shared) and then the second as an overlay on it, and shares
// the overlay: the store's bundle of the second commit is the overlay's
// bytes, a fraction of the whole entry's. Host b, with an empty cache,
// opens the second commit: it fetches the overlay and, for it, the base's
// bundle, builds nothing, and answers as an index built for that commit
// alone. Host c, which holds the base already, fetches the overlay's bytes
// only.
func TestAnOverlayIsSharedAsItsOwnBytes(t *testing.T) {
	repos, first, second := twoCommits(t)
	b, opts := hosts(t, 2)
	for _, commit := range []string{first, second} {
		idx, err := Build(context.Background(), repos, "o/r", commit, opts[0])
		if err != nil {
			t.Fatal(err)
		}
		if idx.Cached || idx.ShareErr != nil {
			t.Fatalf("host a did not build and share %s: cached %v, %v", commit[:8], idx.Cached, idx.ShareErr)
		}
		idx.Close()
	}
	meta, err := readMeta(opts[0].Cache.snapshotDir("o/r", second))
	if err != nil || meta.Base != first {
		t.Fatalf("host a's entry of the second commit: %+v, %v; want an overlay on the first", meta, err)
	}
	reader, _ := b.SharedIndexes("reader")
	size := func(commit string) int {
		var buf bytes.Buffer
		if found, err := reader.Get(context.Background(), sharedKey("o/r", commit, opts[0]), &buf); err != nil || !found {
			t.Fatalf("no bundle of %s: %v", commit[:8], err)
		}
		return buf.Len()
	}
	whole, overlay := size(first), size(second)
	if overlay*3 > whole {
		t.Errorf("the overlay's bundle is %d bytes, the whole entry's %d: the store grows by more than what changed", overlay, whole)
	}

	got, err := Build(context.Background(), repos, "o/r", second, opts[1])
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if !got.Fetched {
		t.Errorf("host b built the snapshot instead of fetching it")
	}
	if m, err := readMeta(opts[1].Cache.snapshotDir("o/r", first)); err != nil || m.Base != "" {
		t.Errorf("host b's base entry: %+v, %v; want the whole first commit, fetched", m, err)
	}

	// Host c already holds the base (it opened the first commit): for the
	// second it fetches the overlay's bytes and nothing else.
	cacheC, err := OpenCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	storeC, _ := b.SharedIndexes("host-c")
	counted := &countingShared{Shared: storeC}
	c := BuildOptions{Languages: opts[0].Languages, Cache: cacheC, Shared: counted}
	idx, err := Build(context.Background(), repos, "o/r", first, c)
	if err != nil {
		t.Fatal(err)
	}
	idx.Close()
	counted.bytes = 0
	again, err := Build(context.Background(), repos, "o/r", second, c)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !again.Fetched || counted.bytes != int64(overlay) {
		t.Errorf("host c with the base fetched %d bytes for the second commit (fetched %v), want the overlay's %d", counted.bytes, again.Fetched, overlay)
	}
	fresh, err := Build(context.Background(), repos, "o/r", second, BuildOptions{Languages: opts[1].Languages})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	sameAnswers(t, "fetched overlay", got, fresh)
	t.Logf("bundles: whole entry %d bytes, overlay %d", whole, overlay)
}

// countingShared counts the bytes a worker gets from the shared store.
type countingShared struct {
	Shared
	bytes int64
}

func (c *countingShared) Get(ctx context.Context, key string, w io.Writer) (bool, error) {
	cw := &countWriter{w: w}
	found, err := c.Shared.Get(ctx, key, cw)
	c.bytes += cw.n
	return found, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

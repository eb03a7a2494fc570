package repoindex

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codesearch"
	"github.com/a2farm/a2farm/worker/history"
	"github.com/a2farm/a2farm/worker/summary"
)

// Cache keeps indexes on disk, content-addressed by repository, commit,
// index Version and the languages (with their versions) that read it, so that all rollouts of a snapshot — in any worker process
// on the host — share one build. Parse results are cached per git blob and
// commit file lists per commit, so a nearby commit of the same repository
// re-indexes incrementally.
//
// Layout under the cache folder:
//
//	v3/snapshots/owner__name/<commit>/   a whole entry: meta.json, graph.bin, sources.bin, chunks.gob, postings.bin, nodes.bin
//	                                      an overlay: meta.json (its base), graph.delta, sources.bin, chunks.gob, added.bin, overlay.bin
//	v3/snapshots/owner__name/<commit>.lock
//	v3/parse/<language>@<version>/<blob[:2]>/<blob>.gob.zst
//	v3/history/owner__name.log (+ .lock)   the repository's commit records (history.Store)
//
// Concurrency: a snapshot is built under an exclusive flock of its own
// (<entry>.build.lock), into a temporary folder renamed into place; users
// hold a shared flock on <entry>.lock while the index is open, and eviction
// skips snapshots it cannot lock exclusively.
// Flock makes the cache Unix-only.
type Cache struct {
	root     string
	maxBytes int64
	mu       sync.Mutex // serialises eviction within a process; guards stores
	// stores are the repositories' commit stores this process opened.
	stores map[string]*history.Store
	// pieces compress and decompress parse results (safe for concurrent
	// use: EncodeAll and DecodeAll only).
	zenc *zstd.Encoder
	zdec *zstd.Decoder
}

// OpenCache opens (creating) a cache at dir bounded to maxBytes of
// snapshot data (0: unbounded); least recently used snapshots go first.
func OpenCache(dir string, maxBytes int64) (*Cache, error) {
	if maxBytes < 0 {
		return nil, fmt.Errorf("cache size must be >= 0, got %d", maxBytes)
	}
	root := filepath.Join(dir, fmt.Sprintf("v%d", Version))
	for _, sub := range []string{"snapshots", "parse", "history"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o755); err != nil {
			return nil, fmt.Errorf("cache %s: %w", dir, err)
		}
	}
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
	if err != nil {
		return nil, err
	}
	return &Cache{root: root, maxBytes: maxBytes, zenc: zenc, zdec: zdec}, nil
}

// postingsName is the entry's chunk postings (codesearch.Postings).
const postingsName = "postings.bin"

// snapshotMeta is meta.json of a cached snapshot.
type snapshotMeta struct {
	Version int    `json:"version"`
	Repo    string `json:"repo"`
	Commit  string `json:"commit"`
	// Languages is the lang.Set key the entry was read with.
	Languages string `json:"languages"`
	// Base, when set, names the whole entry (a commit) this overlay entry
	// is stored on (overlay.go).
	Base   string    `json:"base,omitempty"`
	Files  int       `json:"files"`
	Chunks int       `json:"chunks"`
	Built  time.Time `json:"built"`
}

// snapshotDir is the entry of a snapshot: both search engines rank the
// same postings.
func (c *Cache) snapshotDir(repo, commit string) string {
	return filepath.Join(c.root, "snapshots", gitrepo.DirName(repo), commit)
}

// index returns the index of a snapshot, one way whatever happens first:
// an entry is made in the cache when it is missing (fetched from the farm,
// or built), then the entry is opened (open). The index a build makes in
// memory is never handed out: every user reads the same entry.
func (c *Cache) index(ctx context.Context, r *gitrepo.Repo, repo, commit string, opts BuildOptions) (*Index, error) {
	dir := c.snapshotDir(repo, commit)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	// Users hold a shared lock on <entry>.lock while the index is open, so
	// eviction (exclusive, non-blocking) leaves it be. A missing entry is
	// made under a separate exclusive <entry>.build.lock, never by
	// upgrading the shared lock: an upgrade would wait for every other
	// user to close their index.
	lock, err := lockFile(dir+".lock", syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	var m made
	if !c.complete(dir, opts) {
		build, err := lockFile(dir+".build.lock", syscall.LOCK_EX)
		if err != nil {
			lock.Close()
			return nil, err
		}
		m, err = c.make(ctx, r, repo, commit, opts, dir)
		build.Close()
		if err != nil {
			lock.Close()
			return nil, err
		}
	}
	idx, err := c.open(ctx, r, repo, commit, opts, dir)
	if err != nil {
		lock.Close()
		return nil, err
	}
	m.stamp(idx)
	idx.release = append(idx.release, lock.Close)
	c.touch(dir)
	if m.source != "" { // the cache grew
		c.evict(dir)
	}
	return idx, nil
}

// made says how an entry came to be for this call: built here, fetched
// from the farm, or found made (by another process while this one waited).
type made struct {
	source   string
	timings  []Timing
	history  history.ViewStats
	shareErr error
	blobs    []parsedBlob // the parse results a shared bundle carries
}

// stamp tells an opened index how its entry was made.
func (m made) stamp(idx *Index) {
	switch m.source {
	case SourceBuilt:
		idx.Cached = false
		var opened time.Duration
		for _, t := range idx.Timings {
			opened += t.Duration
		}
		idx.Timings = append(m.timings, Timing{"open", opened}) // the built entry, opened as every user opens it
		idx.History = m.history
		idx.ShareErr = m.shareErr
	case SourceShared:
		idx.Fetched = true
	}
}

// complete reports whether the entry at dir is whole and made for these
// options.
func (c *Cache) complete(dir string, opts BuildOptions) bool {
	meta, ok := entryMeta(dir, opts.Languages.Key())
	// An overlay is whole with its base only (bases are whole entries).
	return ok && (meta.Base == "" || c.complete(filepath.Join(filepath.Dir(dir), meta.Base), opts))
}

// entryMeta reads the meta of the entry at dir; ok is false when it has
// none, or one of another format version or languages key.
func entryMeta(dir, languages string) (meta snapshotMeta, ok bool) {
	meta, err := readMeta(dir)
	return meta, err == nil && meta.Version == Version && meta.Languages == languages
}

// make makes a missing entry: fetched from the farm's shared store (or
// built and shared there), else built here. The caller holds the build
// lock.
func (c *Cache) make(ctx context.Context, r *gitrepo.Repo, repo, commit string, opts BuildOptions, dir string) (made, error) {
	if c.complete(dir, opts) {
		return made{}, nil // made by another process while we waited
	}
	if opts.Shared != nil {
		return c.fromShared(ctx, r, repo, commit, opts, dir)
	}
	return c.buildEntry(ctx, r, commit, repo, opts, dir)
}

// installEntry puts a finished entry, built or fetched into tmp, in place
// of whatever was at dir.
func installEntry(tmp, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("install cache entry: %w", err)
	}
	return nil
}

// touch records a use of an entry for LRU eviction.
func (c *Cache) touch(dir string) {
	now := time.Now()
	_ = os.Chtimes(filepath.Join(dir, "meta.json"), now, now)
}

// buildEntry builds a snapshot's index into a temporary folder, writes
// it as an entry and installs the entry at dir.
func (c *Cache) buildEntry(ctx context.Context, r *gitrepo.Repo, commit, repo string, opts BuildOptions, dir string) (made, error) {
	snap, err := r.At(commit)
	if err != nil {
		return made{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-*")
	if err != nil {
		return made{}, err
	}
	defer os.RemoveAll(tmp)
	// An overlay on the nearest whole entry when one shares enough (in a
	// farm, one the shared store holds: a worker fetching the overlay
	// fetches its base too).
	var base *baseParts
	choosing := time.Now()
	if listed, err := codegraph.ListSnapshot(opts.Languages, snap); err == nil {
		if b, ok := c.chooseBase(opts, listed, dir); ok {
			base = b
			defer base.close() // until the overlay is installed: eviction leaves the base be
		}
	}
	chooseTime := time.Since(choosing)
	idx, err := build(ctx, snap, repo, opts, c, base)
	if err != nil {
		return made{}, err
	}
	defer idx.Close()
	if base != nil {
		idx.Timings = append([]Timing{{"base", chooseTime}}, idx.Timings...)
	}
	start := time.Now()
	baseName := ""
	chunks := len(idx.Chunks.Chunks)
	if base != nil {
		chunks, err = idx.writeOverlay(tmp, base)
		baseName = filepath.Base(base.dir)
	} else {
		err = idx.writeEntry(tmp)
	}
	if perr := idx.parseStored(); err == nil {
		err = perr
	}
	idx.timed("write", start)
	if err != nil {
		return made{}, err
	}
	if err := idx.writeMeta(tmp, opts, baseName, chunks); err != nil {
		return made{}, err
	}
	if err := installEntry(tmp, dir); err != nil {
		return made{}, err
	}
	blobs := idx.blobs
	if base != nil { // an overlay's bundle carries only the parse results its base's bundle lacks
		inBase := base.blobs()
		blobs = slices.DeleteFunc(slices.Clone(blobs), func(b parsedBlob) bool { return inBase[b.blob] })
	}
	return made{source: SourceBuilt, timings: idx.Timings, history: idx.History, blobs: blobs}, nil
}

// writeEntry writes a built index's entry files into dir: the graph, the
// sources, the chunks and their postings (writeMeta then makes the entry
// whole).
func (idx *Index) writeEntry(dir string) error {
	if err := writeGob(filepath.Join(dir, "chunks.gob"), idx.Chunks.Chunks); err != nil {
		return err
	}
	postings, ok := idx.Chunks.Corpus().(*codesearch.Postings)
	if !ok {
		return fmt.Errorf("index %s@%s: built chunks without postings", idx.Repo, idx.Commit)
	}
	if err := os.WriteFile(filepath.Join(dir, postingsName), postings.Encoded(), 0o644); err != nil {
		return err
	}
	// The node search's postings, so that opening the entry analyses no id
	// (an overlay analyses only its new ones).
	nodes := codesearch.BuildNodeSearch(idx.Graph)
	if err := os.WriteFile(filepath.Join(dir, nodesName), nodes.Postings().Encoded(), 0o644); err != nil {
		return err
	}
	var graph bytes.Buffer
	if err := idx.Graph.WriteBinary(&graph); err != nil {
		return err
	}
	if err := os.WriteFile(graphPath(dir), graph.Bytes(), 0o644); err != nil {
		return err
	}
	if err := writeSources(sourcesPath(dir), idx.Graph.Files()); err != nil {
		return err
	}
	return nil
}

// writeMeta writes meta.json, which makes the entry at dir whole.
func (idx *Index) writeMeta(dir string, opts BuildOptions, base string, chunks int) error {
	meta := snapshotMeta{Version: Version, Repo: idx.Repo, Commit: idx.Commit, Languages: opts.Languages.Key(), Base: base,
		Files: len(idx.Graph.Files()), Chunks: chunks, Built: time.Now().UTC()}
	data, _ := json.MarshalIndent(meta, "", "  ")
	return os.WriteFile(filepath.Join(dir, "meta.json"), data, 0o644)
}

// open opens a cache entry without decoding it: the graph (files, nodes
// and edges) is read in one pass, file contents and parse results only
// when a tool shows them, chunk texts only when a search returns them,
// the history from the repository's commit store; the postings are read
// in place (a term's list is decoded when a query asks for it). No git
// object is read unless the commit store lacks the snapshot's history.
func (c *Cache) open(ctx context.Context, r *gitrepo.Repo, repo, commit string, opts BuildOptions, dir string) (*Index, error) {
	idx := &Index{Repo: repo, Commit: commit, Engine: opts.Engine, Cached: true}
	wait := c.historyAsync(ctx, r, repo, commit, opts)
	start := time.Now()
	g, release, chunks, nodes, err := c.openParts(opts, dir)
	if err != nil {
		wait(nil)
		return nil, err
	}
	idx.Graph, idx.Chunks, idx.Nodes = g, chunks, nodes
	idx.release = append(idx.release, release)
	idx.timed("open", start)
	if err := wait(idx); err != nil {
		idx.Close()
		return nil, err
	}
	start = time.Now()
	idx.Summaries = summary.BuildSummaries(idx.Graph, idx.Commits, opts.Summaries)
	if idx.Nodes == nil { // an entry made before node postings were stored
		idx.Nodes = codesearch.BuildNodeSearch(idx.Graph)
	}
	idx.timed("search", start)
	return idx, nil
}

// openParts reads an entry's graph, opens its sources and indexes its
// chunks and node ids; an overlay entry is opened on its base. The node
// search is nil when the entry holds none.
func (c *Cache) openParts(opts BuildOptions, dir string) (*codegraph.Graph, func() error, *codesearch.ChunkIndex, *codesearch.NodeSearch, error) {
	meta, err := readMeta(dir)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if meta.Base != "" {
		return c.openOverlay(opts, dir, meta)
	}
	w, err := c.openWhole(opts, dir)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var nodes *codesearch.NodeSearch
	if w.nodes != nil {
		if nodes, err = codesearch.OpenNodeSearch(w.graph, w.nodes); err != nil {
			w.src.Close()
			return nil, nil, nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, nodesName), err)
		}
	}
	return w.graph, w.src.Close, codesearch.OpenChunkIndex(w.graph, w.chunks, w.postings), nodes, nil
}

// nodesName is a whole entry's node-id postings (codesearch.NodeSearch).
const nodesName = "nodes.bin"

// wholeParts are a whole entry's parts as read from disk.
type wholeParts struct {
	graph    *codegraph.Graph
	src      *entrySources
	chunks   []codesearch.Chunk
	postings *codesearch.Postings
	nodes    *codesearch.Postings // nil: an entry made before node postings were stored
}

// openWhole reads a whole entry's graph, chunks and postings and opens its
// sources.
func (c *Cache) openWhole(opts BuildOptions, dir string) (*wholeParts, error) {
	data, err := os.ReadFile(graphPath(dir))
	if err != nil {
		return nil, err
	}
	src, err := openSources(sourcesPath(dir), c, opts.Languages)
	if err != nil {
		return nil, err
	}
	w := &wholeParts{src: src}
	if w.graph, err = codegraph.ReadGraph(data, opts.Languages, src); err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", graphPath(dir), err)
	}
	src.files = w.graph.Files()
	if err := readGob(filepath.Join(dir, "chunks.gob"), &w.chunks); err != nil {
		src.Close()
		return nil, err
	}
	if w.postings, err = readPostings(filepath.Join(dir, postingsName)); err == nil {
		w.nodes, err = readPostings(filepath.Join(dir, nodesName))
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		src.Close()
		return nil, err
	}
	return w, nil
}

// readPostings reads stored postings.
func readPostings(path string) (*codesearch.Postings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := codesearch.ReadPostings(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// parseAll parses files, reusing cached results by blob id. The new
// results are written to the cache in the background (one file each,
// and creating files is slow on many file systems): stored waits for them.
//
// A file listed without its content (a base has it) whose result is
// missing gets its content from content.
func (c *Cache) parseAll(ctx context.Context, l *lang.Set, files []codegraph.SourceFile, content func(codegraph.SourceFile) ([]byte, error)) (parsed []*lang.File, stored func() error, err error) {
	out := make([]*lang.File, len(files))
	var reads errgroup.Group
	reads.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range files {
		reads.Go(func() error {
			var pf lang.File
			if err := c.readPiece(c.parsePath(l, f), &pf); err == nil && pf.Path == f.Path {
				out[i] = &pf
			}
			return nil
		})
	}
	reads.Wait()
	var missing []int
	for i := range files {
		if out[i] == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return out, func() error { return nil }, nil
	}
	todo := make([]codegraph.SourceFile, len(missing))
	for j, i := range missing {
		todo[j] = files[i]
		if todo[j].Content == nil {
			if todo[j].Content, err = content(files[i]); err != nil {
				return nil, nil, fmt.Errorf("parse %s: %w", files[i].Path, err)
			}
		}
	}
	fresh, err := codegraph.ParseAll(ctx, l, todo)
	if err != nil {
		return nil, nil, err
	}
	for j, i := range missing {
		out[i] = fresh[j]
	}
	var writes errgroup.Group
	writes.SetLimit(runtime.GOMAXPROCS(0))
	done := make(chan error, 1)
	go func() {
		for j, i := range missing {
			writes.Go(func() error { return c.writePiece(c.parsePath(l, files[i]), fresh[j]) })
		}
		done <- writes.Wait()
	}()
	return out, sync.OnceValue(func() error { return <-done }), nil
}

// parsePath keys parse results by the language (and its version) that
// reads the file, then by blob. The path is part of the stored value
// (relative imports depend on it), and checked on load.
func (c *Cache) parsePath(langs *lang.Set, f codegraph.SourceFile) string {
	return c.parsePathOf(readerKey(langs, f.Path), f.Blob)
}

func (c *Cache) parsePathOf(reader, blob string) string {
	return filepath.Join(c.root, "parse", reader, blob[:2], blob+".gob.zst")
}

// readerKey names the language that reads path, with its version.
func readerKey(langs *lang.Set, path string) string {
	if l := langs.Reader(path); l != nil {
		return l.Name() + "@" + l.Version()
	}
	return "none"
}

// historyStore returns the commit store of a repository, opened once per
// process.
func (c *Cache) historyStore(repo string) (*history.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.stores[repo]; ok {
		return s, nil
	}
	s, err := history.OpenStore(filepath.Join(c.root, "history", gitrepo.DirName(repo)+".log"))
	if err != nil {
		return nil, err
	}
	if c.stores == nil {
		c.stores = map[string]*history.Store{}
	}
	c.stores[repo] = s
	return s, nil
}

// commits derives the snapshot's history from the repository's store,
// which first takes in the history the farm's workers shared (when the
// store lacks this snapshot) and afterwards shares what it had to read
// from git. Sharing failures only cost time.
func (c *Cache) commits(ctx context.Context, r *gitrepo.Repo, repo, commit string, opts BuildOptions) (*history.CommitIndex, history.ViewStats, error) {
	store, err := c.historyStore(repo)
	if err != nil {
		return nil, history.ViewStats{}, err
	}
	if opts.Shared != nil && !store.Has(commit) {
		var buf bytes.Buffer
		if found, err := opts.Shared.Get(ctx, historyKey(repo), &buf); err == nil && found {
			_, _ = store.Import(&buf)
		}
	}
	ci, st, err := history.BuildCommitIndex(ctx, r, commit, store)
	if err != nil {
		return nil, st, fmt.Errorf("commit index of %s@%s: %w", repo, commit, err)
	}
	if err := store.Save(); err != nil {
		return nil, st, err
	}
	if opts.Shared != nil && st.FromGit+st.Diffed > 0 {
		var buf bytes.Buffer
		if err := store.Export(&buf); err == nil {
			_ = opts.Shared.Put(ctx, historyKey(repo), &buf)
		}
	}
	return ci, st, nil
}

// evict removes least recently used snapshots until the cache fits its
// bound, never the one just used nor any that is open (locked) elsewhere.
func (c *Cache) evict(keep string) {
	if c.maxBytes == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	type entry struct {
		dir  string
		size int64
		used time.Time
	}
	var entries []entry
	var total int64
	repos, _ := os.ReadDir(filepath.Join(c.root, "snapshots"))
	for _, r := range repos {
		if !r.IsDir() {
			continue
		}
		snaps, _ := os.ReadDir(filepath.Join(c.root, "snapshots", r.Name()))
		for _, s := range snaps {
			if !s.IsDir() || strings.Contains(s.Name(), ".tmp-") {
				continue
			}
			dir := filepath.Join(c.root, "snapshots", r.Name(), s.Name())
			st, err := os.Stat(filepath.Join(dir, "meta.json"))
			if err != nil {
				continue
			}
			size := dirSize(dir)
			total += size
			entries = append(entries, entry{dir, size, st.ModTime()})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return a.used.Compare(b.used) })
	// A base stays while an overlay stored on it does: the overlays go
	// first, least recently used first, and free their bases.
	bases := map[string]int{}
	for _, e := range entries {
		if meta, err := readMeta(e.dir); err == nil && meta.Base != "" {
			bases[filepath.Join(filepath.Dir(e.dir), meta.Base)]++
		}
	}
	for pass := 0; pass < 2 && total > c.maxBytes; pass++ {
		for i := range entries {
			e := &entries[i]
			if total <= c.maxBytes {
				return
			}
			if e.dir == keep || bases[e.dir] > 0 || e.size < 0 {
				continue
			}
			lock, err := lockFile(e.dir+".lock", syscall.LOCK_EX|syscall.LOCK_NB)
			if err != nil {
				continue // in use
			}
			meta, merr := readMeta(e.dir)
			if os.RemoveAll(e.dir) == nil {
				total -= e.size
				e.size = -1 // gone
				if merr == nil && meta.Base != "" {
					bases[filepath.Join(filepath.Dir(e.dir), meta.Base)]-- // its base may go in the next pass
				}
			}
			lock.Close()
		}
	}
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// lockFile opens path and takes a flock on it (how: LOCK_EX or LOCK_SH,
// optionally | LOCK_NB). Closing the file releases the lock.
func lockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

func readMeta(dir string) (snapshotMeta, error) {
	var m snapshotMeta
	data, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}

func writeGob(path string, v any) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// writePiece writes a piece (a parse result) as zstd-compressed gob
// through a temporary file and a rename, so that concurrent readers see the
// old value or the new one, never a mix; a damaged piece after a crash
// decodes with an error and counts as a miss.
func (c *Cache) writePiece(path string, v any) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return atomicfile.WriteCache(path, func(w io.Writer) error {
		_, err := w.Write(c.zenc.EncodeAll(buf.Bytes(), nil))
		return err
	})
}

// readPiece reads what writePiece wrote.
func (c *Cache) readPiece(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if data, err = c.zdec.DecodeAll(data, nil); err != nil {
		return fmt.Errorf("decompress %s: %w", path, err)
	}
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(v); err != nil {
		return errors.Join(fmt.Errorf("decode %s", path), err)
	}
	return nil
}

func readGob(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(v); err != nil {
		return errors.Join(fmt.Errorf("decode %s", path), err)
	}
	return nil
}

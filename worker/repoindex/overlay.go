package repoindex

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codesearch"
)

// An overlay entry stores a snapshot as the changes from a base entry of
// the same repository and languages — the nearest whole entry in the
// cache — instead of whole: its graph as a delta on the base's
// (graph.delta), the contents and chunks of the files the base does not
// have at the same path and blob (sources.bin, chunks.gob), and its search
// corpus as the base's postings with those files' chunks dropped and its
// own added (added.bin), with the snapshot's exact statistics
// (overlay.bin). Opened on its base it answers as the whole entry does,
// record for record. Bases are whole entries only (one level), and an
// entry holding the base's lock while it is open keeps eviction away.
const (
	graphDeltaName = "graph.delta"
	addedName      = "added.bin"
	overlayName    = "overlay.bin"
)

// maxOverlayShare is the share of a snapshot's files that may differ from
// its base for the snapshot to be stored as an overlay; past it the
// snapshot becomes a base of its own.
const maxOverlayShare = 0.5

// baseCandidates bounds the whole entries of a repository a new snapshot
// is compared with, most recently used first.
const baseCandidates = 4

// baseParts are a whole entry opened to be a base.
type baseParts struct {
	*wholeParts
	dir string
	// lock is a shared lock on the base's entry: eviction leaves it be while
	// an overlay is built on it or opened.
	lock *os.File
	// files places the base's files by path and blob: their index and size.
	files map[fileKey][2]int
}

// has reports whether the base holds a file at the same path and blob,
// and its index.
func (b *baseParts) has(f codegraph.SourceFile) (int, bool) {
	bf, ok := b.files[fileKey{f.Path, f.Blob}]
	return bf[0], ok
}

// known lists a file the base has at the same path and blob without
// reading it (codegraph.Known).
func (b *baseParts) known(path, blob string) (codegraph.SourceFile, bool, bool) {
	f, ok := b.files[fileKey{path, blob}]
	return codegraph.SourceFile{Path: path, Blob: blob, Size: f[1]}, true, ok
}

// blobs are the blobs of the base's files: their parse results travel
// with the base's bundle.
func (b *baseParts) blobs() map[string]bool {
	out := make(map[string]bool, len(b.files))
	for k := range b.files {
		out[k.blob] = true
	}
	return out
}

// content reads a file the base has from the base's sources.
func (b *baseParts) content(f codegraph.SourceFile) ([]byte, error) {
	bi, ok := b.has(f)
	if !ok {
		return nil, fmt.Errorf("base %s lacks %s", filepath.Base(b.dir), f.Path)
	}
	return b.src.Content(bi)
}

func (b *baseParts) close() error {
	err := b.src.Close()
	if lerr := b.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// fileKey is a file as entries share it: the same path and blob.
type fileKey struct{ path, blob string }

// chooseBase opens the whole entry beside self (the same repository) that
// shares the most files with files, when one shares enough for an overlay
// (ok false: none does).
func (c *Cache) chooseBase(opts BuildOptions, files []codegraph.SourceFile, self string) (*baseParts, bool) {
	want := make(map[fileKey]bool, len(files))
	for _, f := range files {
		want[fileKey{f.Path, f.Blob}] = true
	}
	type candidate struct {
		dir  string
		used int64
	}
	var cands []candidate
	entries, _ := os.ReadDir(filepath.Dir(self))
	for _, e := range entries {
		dir := filepath.Join(filepath.Dir(self), e.Name())
		if !e.IsDir() || dir == self || !c.complete(dir, opts) {
			continue
		}
		meta, err := readMeta(dir)
		if err != nil || meta.Base != "" {
			continue
		}
		if opts.Shared != nil && !inSharedStore(dir) {
			continue // the farm's workers could not fetch an overlay on it
		}
		st, err := os.Stat(filepath.Join(dir, "meta.json"))
		if err != nil {
			continue
		}
		cands = append(cands, candidate{dir, st.ModTime().UnixNano()})
	}
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(b.used, a.used) })
	best, bestShared := "", 0
	for _, cand := range cands[:min(len(cands), baseCandidates)] {
		data, err := os.ReadFile(graphPath(cand.dir))
		if err != nil {
			continue
		}
		baseFiles, err := codegraph.ReadGraphFiles(data) // the files only: one base is opened, the chosen one
		if err != nil {
			continue
		}
		shared := 0
		for _, f := range baseFiles {
			if want[fileKey{f.Path, f.Blob}] {
				shared++
			}
		}
		if shared > bestShared {
			best, bestShared = cand.dir, shared
		}
	}
	if best == "" || float64(len(files)-bestShared) > maxOverlayShare*float64(len(files)) {
		return nil, false
	}
	b, err := c.openBase(opts, best)
	return b, err == nil
}

// openBase opens a whole entry's parts, holding its shared lock.
func (c *Cache) openBase(opts BuildOptions, dir string) (*baseParts, error) {
	lock, err := lockFile(dir+".lock", syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	if !c.complete(dir, opts) {
		lock.Close()
		return nil, fmt.Errorf("base %s is missing", filepath.Base(dir))
	}
	w, err := c.openWhole(opts, dir)
	if err != nil {
		lock.Close()
		return nil, err
	}
	b := &baseParts{wholeParts: w, dir: dir, lock: lock, files: map[fileKey][2]int{}}
	g := w.graph
	for i, f := range g.Files() {
		size := 0
		if n, ok := g.Lookup(f.Path); ok && g.Nodes[n].FileIndex == int32(i) {
			size = int(g.Nodes[n].EndByte)
		}
		b.files[fileKey{f.Path, f.Blob}] = [2]int{i, size}
	}
	return b, nil
}

// layout places a snapshot's files and chunks on a base: for each file,
// its index in the base (−1: its own), and for each of the snapshot's
// chunks, in order, the base document it keeps or its own added one.
type layout struct {
	fromBase []int // snapshot file → base file, −1: the overlay's own
	own      []int // the overlay's own files, in snapshot order
	// keep numbers the base's documents in the snapshot (−1: dropped);
	// addedAt the overlay's own.
	keep, addedAt []int32
	chunks        []codesearch.Chunk
}

// place lays files out on base; ownChunks are the chunks of the files the
// base lacks, in order.
func place(base *baseParts, files []codegraph.SourceFile, ownChunks []codesearch.Chunk) (*layout, error) {
	// The base's chunks of each file: one run, in file order.
	runs := map[string][2]int{}
	for i, ch := range base.chunks {
		r, ok := runs[ch.File]
		if !ok {
			r = [2]int{i, i}
		}
		r[1] = i + 1
		runs[ch.File] = r
	}
	l := &layout{fromBase: make([]int, len(files)), keep: make([]int32, len(base.chunks))}
	for i := range l.keep {
		l.keep[i] = -1
	}
	next := 0 // the next own chunk
	for fi, f := range files {
		bi, ok := base.has(f)
		if !ok {
			l.fromBase[fi] = -1
			l.own = append(l.own, fi)
			for next < len(ownChunks) && ownChunks[next].File == f.Path {
				l.addedAt = append(l.addedAt, int32(len(l.chunks)))
				l.chunks = append(l.chunks, ownChunks[next])
				next++
			}
			continue
		}
		l.fromBase[fi] = bi
		if r, ok := runs[f.Path]; ok {
			for d := r[0]; d < r[1]; d++ {
				l.keep[d] = int32(len(l.chunks))
				l.chunks = append(l.chunks, base.chunks[d])
			}
		}
	}
	if next != len(ownChunks) {
		return nil, fmt.Errorf("overlay: %d of its %d chunks belong to no file of its own", len(ownChunks)-next, len(ownChunks))
	}
	return l, nil
}

// writeOverlay writes a built index's entry into dir as an overlay on
// base, and says how many chunks the snapshot has.
func (idx *Index) writeOverlay(dir string, base *baseParts) (int, error) {
	files := idx.Graph.Files()
	var ownFiles []codegraph.SourceFile
	for _, f := range files {
		if _, ok := base.has(f); !ok {
			ownFiles = append(ownFiles, f)
		}
	}
	var ownChunks []codesearch.Chunk
	var ownTexts []string
	ownPath := make(map[string]bool, len(ownFiles))
	for _, f := range ownFiles {
		ownPath[f.Path] = true
	}
	for i, ch := range idx.Chunks.Chunks {
		if ownPath[ch.File] {
			ownChunks = append(ownChunks, ch)
			ownTexts = append(ownTexts, idx.Chunks.Text(i))
		}
	}
	l, err := place(base, files, ownChunks)
	if err != nil {
		return 0, err
	}
	added := codesearch.NewPostings(codesearch.TokenLists(ownTexts))
	corpus, err := codesearch.NewOverlay(base.postings, l.keep, added, l.addedAt)
	if err != nil {
		return 0, err
	}
	var delta bytes.Buffer
	if err := idx.Graph.WriteDelta(base.graph, &delta); err != nil {
		return 0, err
	}
	for name, data := range map[string][]byte{graphDeltaName: delta.Bytes(), addedName: added.Encoded(), overlayName: corpus.Delta()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return 0, err
		}
	}
	if err := writeGob(filepath.Join(dir, "chunks.gob"), ownChunks); err != nil {
		return 0, err
	}
	return len(l.chunks), writeSources(sourcesPath(dir), ownFiles)
}

// openOverlay opens an overlay entry at dir on its base: the graph with
// the delta applied, the contents of each file from whichever holds it,
// the chunks laid out and the corpus on the base's postings. The base stays
// open, and its shared lock held, until release is called.
func (c *Cache) openOverlay(opts BuildOptions, dir string, meta snapshotMeta) (g *codegraph.Graph, release func() error, chunks *codesearch.ChunkIndex, nodes *codesearch.NodeSearch, err error) {
	baseDir := filepath.Join(filepath.Dir(dir), meta.Base)
	base, err := c.openBase(opts, baseDir)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("overlay %s: %w", dir, err)
	}
	fail := func(err error) (*codegraph.Graph, func() error, *codesearch.ChunkIndex, *codesearch.NodeSearch, error) {
		base.close()
		return nil, nil, nil, nil, err
	}
	own, err := openSources(sourcesPath(dir), c, opts.Languages)
	if err != nil {
		return fail(err)
	}
	src := &layeredSources{base: base.src, own: own}
	delta, err := os.ReadFile(filepath.Join(dir, graphDeltaName))
	if err != nil {
		own.Close()
		return fail(err)
	}
	if g, err = codegraph.ReadGraphDelta(base.graph, delta, opts.Languages, src); err != nil {
		own.Close()
		return fail(fmt.Errorf("%s: %w", filepath.Join(dir, graphDeltaName), err))
	}
	var ownChunks []codesearch.Chunk
	if err := readGob(filepath.Join(dir, "chunks.gob"), &ownChunks); err != nil {
		own.Close()
		return fail(err)
	}
	l, err := place(base, g.Files(), ownChunks)
	if err != nil {
		own.Close()
		return fail(err)
	}
	src.fromBase = l.fromBase
	src.ownIndex = make(map[int]int, len(l.own))
	ownFiles := make([]codegraph.SourceFile, len(l.own))
	for oi, fi := range l.own {
		src.ownIndex[fi] = oi
		ownFiles[oi] = g.Files()[fi]
	}
	own.files = ownFiles
	added, corpusDelta, err := readTwo(filepath.Join(dir, addedName), filepath.Join(dir, overlayName))
	var corpus *codesearch.Overlay
	if err == nil {
		var addedPostings *codesearch.Postings
		if addedPostings, err = codesearch.ReadPostings(added); err == nil {
			corpus, err = codesearch.OpenOverlay(base.postings, l.keep, addedPostings, l.addedAt, corpusDelta)
		}
	}
	if err != nil {
		own.Close()
		return fail(fmt.Errorf("overlay %s: %w", dir, err))
	}
	if base.nodes != nil {
		if nodes, err = codesearch.OverlayNodeSearch(g, base.graph, base.nodes); err != nil {
			own.Close()
			return fail(fmt.Errorf("overlay %s: %w", dir, err))
		}
	}
	return g, func() error {
		err := own.Close()
		if berr := base.close(); err == nil {
			err = berr
		}
		return err
	}, codesearch.OpenChunkIndex(g, l.chunks, corpus), nodes, nil
}

func readTwo(a, b string) ([]byte, []byte, error) {
	da, err := os.ReadFile(a)
	if err != nil {
		return nil, nil, err
	}
	db, err := os.ReadFile(b)
	return da, db, err
}

// layeredSources reads each file of an overlay's snapshot from the base's
// sources or the overlay's own.
type layeredSources struct {
	base, own *entrySources
	fromBase  []int
	ownIndex  map[int]int
}

func (s *layeredSources) Content(fi int) ([]byte, error) {
	if fi < 0 || fi >= len(s.fromBase) {
		return nil, fmt.Errorf("sources: no file %d", fi)
	}
	if bi := s.fromBase[fi]; bi >= 0 {
		return s.base.Content(bi)
	}
	return s.own.Content(s.ownIndex[fi])
}

func (s *layeredSources) Parsed(fi int) (*lang.File, error) {
	if fi < 0 || fi >= len(s.fromBase) {
		return nil, fmt.Errorf("sources: no file %d", fi)
	}
	if bi := s.fromBase[fi]; bi >= 0 {
		return s.base.Parsed(bi)
	}
	return s.own.Parsed(s.ownIndex[fi])
}

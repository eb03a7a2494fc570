package codesearch

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/blevesearch/bleve/v2"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
)

// Search engines for the code-chunk index.
const (
	// EngineBM25 is the in-memory textbook Lucene BM25 (the default: it
	// retrieves better on the dev set, see docs/BENCHMARKS.md).
	EngineBM25 = "bm25"
	// EngineBleve is bleve's scorch index with its bm25 scoring model
	// (sqrt term frequency, query normalisation).
	EngineBleve = "bleve"
)

// ChunkIndex is the BM25 index over code chunks of non-test files.
type ChunkIndex struct {
	Chunks []Chunk
	texts  []string           // in memory, or nil and read by text
	text   func(i int) string // a chunk's text on demand
	bm25   *BM25
	bleve  bleve.Index
}

// BuildChunkIndex chunks every file the search covers (l's test files
// are left out); withBM25 also indexes the chunk texts (not their paths)
// with textbook BM25.
//
// Files are chunked on every CPU; the chunks keep the files' order.
func BuildChunkIndex(l *lang.Set, files []codegraph.SourceFile, parsed []*lang.File, withBM25 bool) *ChunkIndex {
	perFile := make([][]Chunk, len(files))
	next := make(chan int, len(files))
	for i := range files {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(1, len(files))) {
		wg.Go(func() {
			for i := range next {
				f := files[i]
				if fl := l.Reader(f.Path); fl != nil && !fl.IsTest(f.Path) {
					perFile[i] = ChunkFile(fl, f.Path, f.Content, parsed[i])
				}
			}
		})
	}
	wg.Wait()
	var chunks []Chunk
	for _, c := range perFile {
		chunks = append(chunks, c...)
	}
	return ChunkIndexFrom(files, chunks, withBM25)
}

// ChunkIndexFrom indexes chunks made before (the cache keeps them) of
// files, whose contents are in memory.
func ChunkIndexFrom(files []codegraph.SourceFile, chunks []Chunk, withBM25 bool) *ChunkIndex {
	byPath := make(map[string][]byte, len(files))
	for _, f := range files {
		byPath[f.Path] = f.Content
	}
	ci := &ChunkIndex{Chunks: chunks, texts: make([]string, len(chunks))}
	for i, text := range chunkTexts(chunks, func(path string) []byte { return byPath[path] }) {
		ci.texts[i] = text
	}
	ci.index(withBM25)
	return ci
}

// OpenChunkIndex indexes the chunks of a graph read back from disk: a
// chunk's text is read from the graph's sources only when a search shows
// it (the textbook engine, which tokenizes every chunk up front, reads
// them all).
func OpenChunkIndex(g *codegraph.Graph, chunks []Chunk, withBM25 bool) *ChunkIndex {
	byPath := make(map[string]int, len(g.Files()))
	for i, f := range g.Files() {
		byPath[f.Path] = i
	}
	content := func(path string) []byte {
		fi, ok := byPath[path]
		if !ok {
			return nil
		}
		c, _ := g.Content(fi)
		return c
	}
	ci := &ChunkIndex{Chunks: chunks, text: func(i int) string {
		text, _ := chunkText(chunks[i], content(chunks[i].File))
		return text
	}}
	if withBM25 {
		ci.texts = make([]string, len(chunks))
		for i, text := range chunkTexts(chunks, content) {
			ci.texts[i] = text
		}
	}
	ci.index(withBM25)
	return ci
}

// chunkTexts yields each chunk's text in order, splitting each file once.
func chunkTexts(chunks []Chunk, content func(path string) []byte) func(yield func(int, string) bool) {
	return func(yield func(int, string) bool) {
		split := map[string][]string{}
		for i, c := range chunks {
			lines, ok := split[c.File]
			if !ok {
				lines = strings.Split(string(content(c.File)), "\n")
				split[c.File] = lines
			}
			if !yield(i, linesText(lines, c)) {
				return
			}
		}
	}
}

// chunkText is the text of one chunk of a file's content.
func chunkText(c Chunk, content []byte) (string, bool) {
	if content == nil {
		return "", false
	}
	return linesText(strings.Split(string(content), "\n"), c), true
}

func linesText(lines []string, c Chunk) string {
	if c.StartLine-1 >= len(lines) || c.StartLine < 1 {
		return ""
	}
	return strings.Join(lines[c.StartLine-1:min(c.EndLine, len(lines))], "\n")
}

// index builds the textbook BM25 engine over the texts when asked.
func (ci *ChunkIndex) index(withBM25 bool) {
	if !withBM25 {
		return
	}
	docs := make([][]string, len(ci.texts))
	for i, text := range ci.texts {
		docs[i] = Tokens(text)
	}
	ci.bm25 = NewBM25(docs)
}

// InMemory reports whether the chunks' texts are held in memory (a built
// index, or the textbook engine) rather than read on demand.
func (ci *ChunkIndex) InMemory() bool { return ci.texts != nil }

// Text returns the text of chunk i.
func (ci *ChunkIndex) Text(i int) string {
	if ci.texts != nil {
		return ci.texts[i]
	}
	return ci.text(i)
}

// BuildBleve indexes the chunks in a scorch index at dir (bleve ignores
// bm25 scoring in memory-only indexes), in batches.
func (ci *ChunkIndex) BuildBleve(dir string) error {
	im, err := searchMapping()
	if err != nil {
		return err
	}
	idx, err := bleve.New(dir, im)
	if err != nil {
		return fmt.Errorf("bleve index at %s: %w", dir, err)
	}
	const batchSize = 1 << 30
	batch := idx.NewBatch()
	for i, text := range ci.texts {
		if err := batch.Index(strconv.Itoa(i), map[string]any{"text": text}); err != nil {
			idx.Close()
			return err
		}
		if batch.Size() >= batchSize {
			if err := idx.Batch(batch); err != nil {
				idx.Close()
				return err
			}
			batch = idx.NewBatch()
		}
	}
	if err := idx.Batch(batch); err != nil {
		idx.Close()
		return err
	}
	ci.bleve = idx
	return nil
}

// OpenBleve attaches a scorch index that BuildBleve wrote, read-only
// (many processes may open it at once).
func (ci *ChunkIndex) OpenBleve(dir string) error {
	idx, err := bleve.OpenUsing(dir, map[string]any{"read_only": true})
	if err != nil {
		return fmt.Errorf("open bleve index %s: %w", dir, err)
	}
	ci.bleve = idx
	return nil
}

// Close releases the bleve index, if any.
func (ci *ChunkIndex) Close() error {
	if ci.bleve == nil {
		return nil
	}
	err := ci.bleve.Close()
	ci.bleve = nil
	return err
}

// Search returns the k best chunks for a free-text query.
func (ci *ChunkIndex) Search(engine, query string, k int) ([]Hit, error) {
	switch engine {
	case EngineBM25, "":
		if ci.bm25 == nil {
			return nil, fmt.Errorf("textbook BM25 index not built")
		}
		return ci.bm25.Search(Tokens(query), k), nil
	case EngineBleve:
		if ci.bleve == nil {
			return nil, fmt.Errorf("bleve index not built")
		}
		q := bleve.NewMatchQuery(query)
		q.SetField("text")
		q.Analyzer = AnalyzerName
		req := bleve.NewSearchRequestOptions(q, k, 0, false)
		// Ties broken by document id: otherwise their order depends on how
		// bleve laid out its segments, which differs between two builds
		// of the same chunks.
		req.SortBy([]string{"-_score", "_id"})
		res, err := ci.bleve.Search(req)
		if err != nil {
			return nil, err
		}
		hits := make([]Hit, 0, len(res.Hits))
		for _, h := range res.Hits {
			d, err := strconv.Atoi(h.ID)
			if err != nil {
				return nil, fmt.Errorf("bleve hit %q: %w", h.ID, err)
			}
			hits = append(hits, Hit{Doc: d, Score: h.Score})
		}
		return hits, nil
	}
	return nil, fmt.Errorf("unknown search engine %q (want %s or %s)", engine, EngineBM25, EngineBleve)
}

// NodeSearch is the BM25 index over non-test node ids, split at "/", "."
// and ":".
type NodeSearch struct {
	ids  []codegraph.NodeID
	bm25 *BM25
}

// Bytes estimates the heap the node search holds.
func (ns *NodeSearch) Bytes() int64 {
	n := int64(4 * len(ns.ids))
	if ns.bm25 != nil {
		n += ns.bm25.Bytes()
	}
	return n
}

// BuildNodeSearch indexes every non-test node id of g.
func BuildNodeSearch(g *codegraph.Graph) *NodeSearch {
	ns := &NodeSearch{}
	var docs [][]string
	split := strings.NewReplacer("/", " ", ".", " ", ":", " ")
	for i, n := range g.Nodes {
		if codegraph.IsTestID(n.ID) {
			continue
		}
		ns.ids = append(ns.ids, codegraph.NodeID(i))
		docs = append(docs, Tokens(split.Replace(n.ID)))
	}
	ns.bm25 = NewBM25(docs)
	return ns
}

// Search returns up to k nodes with a positive score, best first.
func (ns *NodeSearch) Search(query string, k int) []codegraph.NodeID {
	split := strings.NewReplacer("/", " ", ".", " ", ":", " ")
	var out []codegraph.NodeID
	for _, h := range ns.bm25.Search(Tokens(split.Replace(query)), k) {
		if h.Score > 0 {
			out = append(out, ns.ids[h.Doc])
		}
	}
	return out
}

package codesearch

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
)

// Search engines for the code-chunk index: two scorings of the same
// postings (Rank).
const (
	// EngineBM25 is textbook Lucene BM25.
	EngineBM25 = "bm25"
	// EngineBleve is bleve's bm25 scoring model (sqrt term frequency, query
	// normalisation, the average length taken as distinct terms per
	// document), reproduced over the postings: a scorch index of the same
	// chunks ranks them the same (TestPostingsRankAsBleveDoes).
	EngineBleve = "bleve"
)

// ChunkIndex is the BM25 index over code chunks of non-test files: the
// chunks, their postings, and their texts (in memory when built, read from
// the files' contents on demand when opened).
type ChunkIndex struct {
	Chunks []Chunk
	texts  []string           // in memory, or nil and read by text
	text   func(i int) string // a chunk's text on demand
	corpus func() Corpus
}

// BuildChunkIndex chunks every file the search covers (l's test files
// are left out) and indexes the chunks' texts.
//
// Files are chunked on every CPU; the chunks keep the files' order.
func BuildChunkIndex(l *lang.Set, files []codegraph.SourceFile, parsed []*lang.File) *ChunkIndex {
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
	return ChunkIndexFrom(files, chunks)
}

// ChunkIndexFrom indexes chunks made before of files, whose contents are in
// memory.
func ChunkIndexFrom(files []codegraph.SourceFile, chunks []Chunk) *ChunkIndex {
	byPath := make(map[string][]byte, len(files))
	for _, f := range files {
		byPath[f.Path] = f.Content
	}
	ci := &ChunkIndex{Chunks: chunks, texts: make([]string, len(chunks))}
	for i, text := range chunkTexts(chunks, func(path string) []byte { return byPath[path] }) {
		ci.texts[i] = text
	}
	// Indexed when first asked for: a snapshot stored as an overlay
	// indexes only the chunks its base lacks.
	ci.corpus = sync.OnceValue(func() Corpus { return NewPostings(TokenLists(ci.texts)) })
	return ci
}

// TokenLists analyses texts on every CPU.
func TokenLists(texts []string) [][]string {
	out := make([][]string, len(texts))
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), max(1, len(texts)))
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(texts); i += workers {
				out[i] = Tokens(texts[i])
			}
		})
	}
	wg.Wait()
	return out
}

// OpenChunkIndex attaches stored chunks of a graph read back from disk to
// their stored corpus: a chunk's text is read from the graph's sources
// only when a search shows it.
func OpenChunkIndex(g *codegraph.Graph, chunks []Chunk, corpus Corpus) *ChunkIndex {
	byPath := make(map[string]int, len(g.Files()))
	for i, f := range g.Files() {
		byPath[f.Path] = i
	}
	return &ChunkIndex{Chunks: chunks, corpus: func() Corpus { return corpus }, text: func(i int) string {
		fi, ok := byPath[chunks[i].File]
		if !ok {
			return ""
		}
		c, _ := g.Content(fi)
		text, _ := chunkText(chunks[i], c)
		return text
	}}
}

// Corpus is what the index ranks (a *Postings when built, or an *Overlay).
func (ci *ChunkIndex) Corpus() Corpus { return ci.corpus() }

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

// InMemory reports whether the chunks' texts are held in memory (a built
// index) rather than read on demand.
func (ci *ChunkIndex) InMemory() bool { return ci.texts != nil }

// Text returns the text of chunk i.
func (ci *ChunkIndex) Text(i int) string {
	if ci.texts != nil {
		return ci.texts[i]
	}
	return ci.text(i)
}

// Search returns the k best chunks for a free-text query, ranked by
// engine.
func (ci *ChunkIndex) Search(engine, query string, k int) ([]Hit, error) {
	if engine != EngineBM25 && engine != EngineBleve {
		return nil, fmt.Errorf("unknown search engine %q (want %s or %s)", engine, EngineBM25, EngineBleve)
	}
	return Rank(engine, ci.corpus(), Tokens(query), k), nil
}

// NodeSearch is the textbook BM25 index over non-test node ids, split at
// "/", "." and ":", in graph order.
type NodeSearch struct {
	ids    []codegraph.NodeID
	corpus Corpus
}

// Bytes estimates the heap the node search holds.
func (ns *NodeSearch) Bytes() int64 {
	n := int64(4 * len(ns.ids))
	if sized, ok := ns.corpus.(interface{ Bytes() int64 }); ok {
		n += sized.Bytes()
	}
	return n
}

var nodeSplit = strings.NewReplacer("/", " ", ".", " ", ":", " ")

// searchedNodes are g's non-test nodes, in order: the node search's
// documents.
func searchedNodes(g *codegraph.Graph) []codegraph.NodeID {
	var ids []codegraph.NodeID
	for i, n := range g.Nodes {
		if !codegraph.IsTestID(n.ID) {
			ids = append(ids, codegraph.NodeID(i))
		}
	}
	return ids
}

func nodeTokens(g *codegraph.Graph, ids []codegraph.NodeID) [][]string {
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = nodeSplit.Replace(g.Nodes[id].ID)
	}
	return TokenLists(texts)
}

// BuildNodeSearch indexes every non-test node id of g.
func BuildNodeSearch(g *codegraph.Graph) *NodeSearch {
	ids := searchedNodes(g)
	return &NodeSearch{ids: ids, corpus: NewPostings(nodeTokens(g, ids))}
}

// Postings are the node search's stored form when it was built whole (nil
// when it is an overlay).
func (ns *NodeSearch) Postings() *Postings {
	p, _ := ns.corpus.(*Postings)
	return p
}

// OpenNodeSearch attaches postings BuildNodeSearch made for g.
func OpenNodeSearch(g *codegraph.Graph, stored *Postings) (*NodeSearch, error) {
	ids := searchedNodes(g)
	if n := stored.Stats().Docs; n != len(ids) {
		return nil, fmt.Errorf("codesearch: node postings of %d documents for %d nodes", n, len(ids))
	}
	return &NodeSearch{ids: ids, corpus: stored}, nil
}

// OverlayNodeSearch is g's node search made from base's (whose stored
// postings are baseStored): the nodes base has keep their postings, only
// the new ids are analysed, and the statistics are g's own, so it ranks
// as BuildNodeSearch(g) does.
func OverlayNodeSearch(g, base *codegraph.Graph, baseStored *Postings) (*NodeSearch, error) {
	ids := searchedNodes(g)
	baseIDs := searchedNodes(base)
	if n := baseStored.Stats().Docs; n != len(baseIDs) {
		return nil, fmt.Errorf("codesearch: base node postings of %d documents for %d nodes", n, len(baseIDs))
	}
	at := make(map[string]int32, len(ids))
	for i, id := range ids {
		at[g.Nodes[id].ID] = int32(i)
	}
	keep := make([]int32, len(baseIDs))
	kept := make([]bool, len(ids))
	for i, id := range baseIDs {
		keep[i] = -1
		if to, ok := at[base.Nodes[id].ID]; ok {
			keep[i], kept[to] = to, true
		}
	}
	var addedAt []int32
	var added []codegraph.NodeID
	for i, id := range ids {
		if !kept[i] {
			addedAt, added = append(addedAt, int32(i)), append(added, id)
		}
	}
	o, err := NewOverlay(baseStored, keep, NewPostings(nodeTokens(g, added)), addedAt)
	if err != nil {
		return nil, err
	}
	return &NodeSearch{ids: ids, corpus: o}, nil
}

// Search returns up to k nodes with a positive score, best first.
func (ns *NodeSearch) Search(query string, k int) []codegraph.NodeID {
	var out []codegraph.NodeID
	for _, h := range rankTextbook(ns.corpus, Tokens(nodeSplit.Replace(query)), k) {
		if h.Score > 0 {
			out = append(out, ns.ids[h.Doc])
		}
	}
	return out
}

package codesearch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2"
)

// bleveIndex is the reference the postings are checked against: a scorch
// index of the texts, as a2farm built one per snapshot before the postings
// replaced it, searched as it searched it.
type bleveIndex struct{ idx bleve.Index }

func newBleveIndex(t *testing.T, texts []string) *bleveIndex {
	t.Helper()
	im, err := searchMapping()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := bleve.New(filepath.Join(t.TempDir(), "chunks.bleve"), im) // bleve ignores bm25 in memory-only indexes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	batch := idx.NewBatch()
	for i, text := range texts {
		if err := batch.Index(strconv.Itoa(i), map[string]any{"text": text}); err != nil {
			t.Fatal(err)
		}
	}
	if err := idx.Batch(batch); err != nil {
		t.Fatal(err)
	}
	return &bleveIndex{idx}
}

func (b *bleveIndex) search(t *testing.T, query string, k int) []Hit {
	t.Helper()
	q := bleve.NewMatchQuery(query)
	q.SetField("text")
	q.Analyzer = AnalyzerName
	req := bleve.NewSearchRequestOptions(q, k, 0, false)
	req.SortBy([]string{"-_score", "_id"}) // ties by id, as Rank breaks them
	res, err := b.idx.Search(req)
	if err != nil {
		t.Fatal(err)
	}
	hits := make([]Hit, 0, len(res.Hits))
	for _, h := range res.Hits {
		d, err := strconv.Atoi(h.ID)
		if err != nil {
			t.Fatal(err)
		}
		hits = append(hits, Hit{Doc: d, Score: h.Score})
	}
	return hits
}

// randomCorpus is n chunk-like texts over a Zipf-like vocabulary, some
// empty, some long, with words the analyser stems and stops.
func randomCorpus(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	words := []string{"def", "return", "self", "parse_header", "headers", "request", "session", "the", "and", "running",
		"adapter", "HTTPAdapter", "url", "encode", "decode", "json", "raise", "ValueError", "cookie", "cookies", "proxy",
		"timeout", "retry", "stream", "chunk", "chunks", "content", "iter_content", "auth", "digest", "netrc", "quote"}
	texts := make([]string, n)
	for i := range texts {
		var b strings.Builder
		length := rng.IntN(60)
		if i%17 == 0 {
			length = 400 + rng.IntN(400)
		}
		for range length {
			w := words[int(float64(len(words))*math.Pow(rng.Float64(), 2.2))]
			if rng.IntN(9) == 0 {
				w = fmt.Sprintf("%s_%d", w, rng.IntN(40))
			}
			b.WriteString(w)
			b.WriteString([]string{" ", "(", ".", "\n    ", ", "}[rng.IntN(5)])
		}
		texts[i] = b.String()
	}
	return texts
}

// TestPostingsRankAsBleveDoes: on random corpora, for queries of one to
// ten tokens (repeated tokens, unknown ones, stop words), the postings
// ranked with bleve's bm25 give exactly the documents, order and scores a
// real bleve index of the same texts returns; of more tokens, the same
// documents in the same order with scores equal but for the last bits
// (bleve then sums in a heap's order).
func TestPostingsRankAsBleveDoes(t *testing.T) {
	queries := []string{"session", "parse_header", "cookie cookies", "the headers", "json json decode", "no_such_word",
		"HTTPAdapter adapter running proxy", "retry timeout stream chunk content", "def return self raise quote url encode",
		"auth digest netrc quote url encode decode json raise ValueError", // ten tokens
		"auth digest netrc quote url encode decode json raise ValueError cookie session request headers"}
	for seed := range uint64(3) {
		texts := randomCorpus(seed, 300+int(seed)*150)
		ref := newBleveIndex(t, texts)
		p := NewPostings(TokenLists(texts))
		for _, q := range queries {
			want := ref.search(t, q, len(texts))
			got := rankBleve(p, Tokens(q), len(texts))
			exact := len(Tokens(q)) <= 10
			if len(got) != len(want) {
				t.Errorf("seed %d %q: %d hits, bleve %d", seed, q, len(got), len(want))
				continue
			}
			for i := range want {
				same := got[i].Score == want[i].Score
				if !exact {
					same = math.Abs(got[i].Score-want[i].Score) <= 1e-12*math.Abs(want[i].Score)
				}
				if got[i].Doc != want[i].Doc || !same {
					t.Errorf("seed %d %q: hit %d = %+v, bleve %+v", seed, q, i, got[i], want[i])
					break
				}
			}
		}
	}
}

// TestPostingsRankAsTheTextbookEngineDoes: the postings ranked with
// textbook BM25 are BM25.Search, score for score.
func TestPostingsRankAsTheTextbookEngineDoes(t *testing.T) {
	docs := TokenLists(randomCorpus(11, 500))
	b, p := NewBM25(docs), NewPostings(docs)
	for _, q := range []string{"session", "cookie cookies cookie", "the", "auth digest netrc quote url encode decode json raise ValueError cookie", "nothing_here"} {
		want, got := b.Search(Tokens(q), 1000), rankTextbook(p, Tokens(q), 1000)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q:\n got %v\nwant %v", q, got, want)
		}
	}
}

// snapshotOf derives a snapshot's documents from a base's: some dropped,
// new ones inserted at random places. keep and addedAt number them.
func snapshotOf(rng *rand.Rand, base [][]string, fresh [][]string) (docs [][]string, keep, addedAt []int32, added [][]string) {
	keep = make([]int32, len(base))
	next := 0
	for i, d := range base {
		for rng.IntN(12) == 0 && next < len(fresh) { // an added document before base document i
			addedAt = append(addedAt, int32(len(docs)))
			added = append(added, fresh[next])
			docs = append(docs, fresh[next])
			next++
		}
		if rng.IntN(6) == 0 {
			keep[i] = -1
			continue
		}
		keep[i] = int32(len(docs))
		docs = append(docs, d)
	}
	return docs, keep, addedAt, added
}

// TestAnOverlayRanksAsAFreshCorpus: a base with documents dropped and
// added ranks, with both engines, exactly as postings built for the
// snapshot's documents alone — the same documents, order and scores — and
// so does the overlay read back from its stored delta. Terms that only the
// dropped documents held, and terms only the added ones bring, included.
func TestAnOverlayRanksAsAFreshCorpus(t *testing.T) {
	queries := []string{"session", "parse_header headers", "cookie cookies", "json decode raise ValueError", "retry_3", "quote url encode",
		"auth digest netrc quote url encode decode json raise ValueError cookie", "newword_only_added", "no_such_word"}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 99))
		base := TokenLists(randomCorpus(seed, 400))
		extra := TokenLists(randomCorpus(seed+100, 80))
		extra[0] = append(extra[0], "newword_only_added")
		docs, keep, addedAt, added := snapshotOf(rng, base, extra)
		fresh := NewPostings(docs)
		o, err := NewOverlay(NewPostings(base), keep, NewPostings(added), addedAt)
		if err != nil {
			t.Fatal(err)
		}
		read, err := OpenOverlay(NewPostings(base), keep, NewPostings(added), addedAt, o.Delta())
		if err != nil {
			t.Fatal(err)
		}
		if o.Stats() != fresh.Stats() || read.Stats() != fresh.Stats() {
			t.Fatalf("seed %d: overlay stats %+v (read back %+v), fresh %+v", seed, o.Stats(), read.Stats(), fresh.Stats())
		}
		for _, c := range []Corpus{o, read} {
			for _, q := range queries {
				for _, engine := range []string{EngineBleve, EngineBM25} {
					got, want := Rank(engine, c, Tokens(q), 1000), Rank(engine, fresh, Tokens(q), 1000)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("seed %d %s %q:\n got %v\nwant %v", seed, engine, q, got, want)
					}
				}
			}
		}
		t.Logf("seed %d: %d documents (%d dropped, %d added), delta %d bytes", seed, fresh.Stats().Docs, len(keep)-countKept(keep), len(added), len(o.Delta()))
	}
}

// TestAnOverlayRefusesABadNumbering: documents numbered twice or out of
// range, or a delta of another overlay, are refused.
func TestAnOverlayRefusesABadNumbering(t *testing.T) {
	base, added := NewPostings([][]string{{"a"}, {"b"}}), NewPostings([][]string{{"c"}})
	for _, tc := range []struct {
		keep, addedAt []int32
	}{{[]int32{0, 1}, []int32{1}}, {[]int32{0, 1}, []int32{3}}, {[]int32{0, -1}, nil}} {
		if _, err := NewOverlay(base, tc.keep, added, tc.addedAt); err == nil {
			t.Errorf("keep %v, added at %v: accepted", tc.keep, tc.addedAt)
		}
	}
	o, err := NewOverlay(base, []int32{0, -1}, added, []int32{1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenOverlay(base, []int32{0, 2}, added, []int32{1}, o.Delta()); err == nil {
		t.Error("a delta opened with another numbering was accepted")
	}
}

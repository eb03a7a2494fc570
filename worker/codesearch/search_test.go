package codesearch

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

func TestTokens(t *testing.T) {
	got := Tokens("The parse_header() function: Running runs, a x HTTPAdapter!")
	want := []string{"parse_head", "function", "run", "run", "httpadapt"}
	if !slices.Equal(got, want) {
		t.Errorf("Tokens = %q, want %q", got, want)
	}
}

// TestBM25Textbook checks scores against values worked by hand.
func TestBM25Textbook(t *testing.T) {
	docs := [][]string{
		{"cat", "dog"},        // len 2
		{"cat", "cat", "cat"}, // len 3
		{"bird"},              // len 1
	}
	b := NewBM25(docs)
	hits := b.Search([]string{"cat", "cat"}, 10) // repeated query words count once
	if len(hits) != 2 {
		t.Fatalf("hits = %v", hits)
	}
	// N=3, df(cat)=2: idf = ln(1 + (3-2+0.5)/(2+0.5)) = ln(1.6); avgdl = 2.
	idf := math.Log(1.6)
	score := func(tf, dl float64) float64 {
		return idf * tf * (BM25K1 + 1) / (tf + BM25K1*(1-BM25B+BM25B*dl/2))
	}
	want := []Hit{{1, score(3, 3)}, {0, score(1, 2)}}
	for i := range want {
		if hits[i].Doc != want[i].Doc || math.Abs(hits[i].Score-want[i].Score) > 1e-12 {
			t.Errorf("hit %d = %+v, want %+v", i, hits[i], want[i])
		}
	}
	if got := b.Search([]string{"fish"}, 10); len(got) != 0 {
		t.Errorf("unknown word matched %v", got)
	}
	if got := NewBM25(nil).Search([]string{"x"}, 3); got != nil {
		t.Errorf("empty index returned %v", got)
	}
}

func parse(t *testing.T, path, src string) *python.File {
	t.Helper()
	p, err := python.NewParser()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := p.Parse(path, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestChunkFileAlignsToDefinitions(t *testing.T) {
	var b strings.Builder
	b.WriteString("\"\"\"Doc.\"\"\"\nimport os\n\nLIMIT = 3\n\n")
	body := strings.Repeat("    x = compute(a, b, c) + other(d, e)\n", 20) // ~300 tokens
	for i := range 4 {
		fmt.Fprintf(&b, "def f%d(a, b, c, d, e):\n%s\n\n", i, body)
	}
	src := b.String()
	chunks := ChunkFile(python.Language{}, "m.py", []byte(src), parse(t, "m.py", src))
	if len(chunks) < 3 {
		t.Fatalf("chunks = %d, want several", len(chunks))
	}
	if got := chunks[0].SpanIDs[:3]; !slices.Equal(got, []string{"docstring", "imports", "LIMIT"}) {
		t.Errorf("first chunk spans = %q", chunks[0].SpanIDs)
	}
	prevEnd := 0
	for _, c := range chunks {
		if c.StartLine != prevEnd+1 {
			t.Errorf("chunk %+v does not start after line %d", c, prevEnd)
		}
		if c.Tokens > ChunkMaxTokens {
			t.Errorf("chunk %+v over the max", c)
		}
		// every function starts a chunk or sits wholly inside one
		prevEnd = c.EndLine
	}
	if total := strings.Count(src, "\n"); prevEnd != total {
		t.Errorf("chunks end at line %d of %d", prevEnd, total)
	}
}

func TestChunkFileSplitsHugeDefinitions(t *testing.T) {
	src := "class Big:\n" + strings.Repeat("    def m(self):\n"+strings.Repeat("        y = a + b + c + d + e + f + g\n", 40)+"\n", 12)
	chunks := ChunkFile(python.Language{}, "big.py", []byte(src), parse(t, "big.py", src))
	if len(chunks) < 2 {
		t.Fatalf("chunks = %d; a class over %d tokens must be split", len(chunks), ChunkMaxTokens)
	}
	for _, c := range chunks {
		if c.Tokens > ChunkMaxTokens {
			t.Errorf("chunk over the max: %+v", c)
		}
	}
	many := strings.Repeat("def f():\n"+strings.Repeat("    z = q(1, 2, 3, 4, 5, 6, 7, 8, 9)\n", 60)+"\n", 300)
	if n := len(ChunkFile(python.Language{}, "many.py", []byte(many), parse(t, "many.py", many))); n != MaxChunksPerFile {
		t.Errorf("chunks of a huge file = %d, want the cap %d", n, MaxChunksPerFile)
	}
}

func TestChunkSearchEngines(t *testing.T) {
	files := []codegraph.SourceFile{
		{Path: "pkg/a.py", Content: []byte("def parse_header(line):\n    return line.split(':')\n")},
		{Path: "pkg/b.py", Content: []byte("def render_body(text):\n    return text.strip()\n")},
		{Path: "tests/test_a.py", Content: []byte("def test_parse_header():\n    parse_header('x')\n")},
	}
	parsed, err := codegraph.ParseAll(context.Background(), lang.NewSet(python.Language{}), files)
	if err != nil {
		t.Fatal(err)
	}
	ci := BuildChunkIndex(lang.NewSet(python.Language{}), files, parsed)
	if len(ci.Chunks) != 2 {
		t.Fatalf("chunks = %+v; test files must be left out", ci.Chunks)
	}
	for _, eng := range []string{EngineBM25, EngineBleve} {
		hits, err := ci.Search(eng, "where does parse_header split a line", 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || ci.Chunks[hits[0].Doc].File != "pkg/a.py" {
			t.Errorf("%s: hits = %+v, want pkg/a.py first", eng, hits)
		}
		sc, err := ci.ScoreRetrieval(eng, "render the body text", []string{"pkg/b.py"}, 1)
		if err != nil || sc.Recall != 1 || sc.RR != 1 {
			t.Errorf("%s: score = %+v, %v", eng, sc, err)
		}
	}
	if _, err := ci.Search("lucene", "x", 1); err == nil {
		t.Error("unknown engine accepted")
	}
}

func TestNodeSearch(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}), graphtest.Files)
	ns := BuildNodeSearch(g)
	hits := ns.Search("Engine run", 3)
	if len(hits) == 0 || g.Node(hits[0]).ID != "pkg/core.py:Engine.run" {
		var ids []string
		for _, h := range hits {
			ids = append(ids, g.Node(h).ID)
		}
		t.Errorf("hits = %q, want pkg/core.py:Engine.run first", ids)
	}
	for _, h := range ns.Search("test_core test_run", 10) {
		if codegraph.IsTestID(g.Node(h).ID) {
			t.Errorf("test node %s returned", g.Node(h).ID)
		}
	}
}

// TestAnOverlaidNodeSearchRanksAsAFreshOne: the node search of a snapshot
// made from its base's stored postings (ids gone, ids new, ids kept at new
// places) ranks every query — scores included — as one built for the
// snapshot alone.
func TestAnOverlaidNodeSearchRanksAsAFreshOne(t *testing.T) {
	l := lang.NewSet(python.Language{})
	base := graphtest.Build(t, l, graphtest.Files)
	next := map[string]string{}
	for p, c := range graphtest.Files {
		next[p] = c
	}
	delete(next, "pkg/base.py")
	next["pkg/engine_extra.py"] = "class EngineTurbo:\n    def run(self):\n        return 1\n\n    def helper_run(self):\n        return 2\n"
	next["pkg/core.py"] = "# moved down\n" + graphtest.Files["pkg/core.py"]
	g := graphtest.Build(t, l, next)
	fresh := BuildNodeSearch(g)
	overlaid, err := OverlayNodeSearch(g, base, BuildNodeSearch(base).Postings())
	if err != nil {
		t.Fatal(err)
	}
	if overlaid.corpus.Stats() != fresh.corpus.Stats() {
		t.Fatalf("stats %+v, fresh %+v", overlaid.corpus.Stats(), fresh.corpus.Stats())
	}
	for _, q := range []string{"Engine run", "helper", "util helpers slug", "EngineTurbo helper_run", "base Base", "pkg core"} {
		toks := Tokens(nodeSplit.Replace(q))
		if got, want := rankTextbook(overlaid.corpus, toks, 100), rankTextbook(fresh.corpus, toks, 100); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q: %v, fresh %v", q, got, want)
		}
		if got, want := overlaid.Search(q, 10), fresh.Search(q, 10); !slices.Equal(got, want) {
			t.Errorf("%q: nodes %v, fresh %v", q, got, want)
		}
	}
	if _, err := OpenNodeSearch(g, BuildNodeSearch(base).Postings()); err == nil && len(searchedNodes(g)) != len(searchedNodes(base)) {
		t.Error("another graph's node postings were attached")
	}
}

package codesearch

// Textbook Lucene BM25 parameters (EngineBM25, and the node search).
const (
	BM25K1 = 1.5
	BM25B  = 0.75
)

// Hit is a scored document.
type Hit struct {
	Doc   int
	Score float64
}

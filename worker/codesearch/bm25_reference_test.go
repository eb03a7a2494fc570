package codesearch

import (
	"math"
)

// The textbook engine's reference: a map-based index written from the
// formula alone, which the postings' ranking is checked against
// (TestPostingsRankAsTheTextbookEngineDoes) — the engine a2farm used
// before the stored postings.

// BM25 is an in-memory inverted index scored with textbook Lucene BM25:
// idf = ln(1 + (N - df + 0.5)/(df + 0.5)), tf saturation with k1 and length
// normalisation with b over token counts.
type BM25 struct {
	postings map[string][]posting
	lengths  []float64
	avgLen   float64
}

type posting struct {
	doc int32
	tf  float32
}

// NewBM25 indexes documents given as token lists.
func NewBM25(docs [][]string) *BM25 {
	b := &BM25{postings: map[string][]posting{}, lengths: make([]float64, len(docs))}
	total := 0.0
	tf := map[string]float32{}
	for i, toks := range docs {
		clear(tf)
		for _, t := range toks {
			tf[t]++
		}
		for t, n := range tf {
			b.postings[t] = append(b.postings[t], posting{int32(i), n})
		}
		b.lengths[i] = float64(len(toks))
		total += float64(len(toks))
	}
	if len(docs) > 0 {
		b.avgLen = total / float64(len(docs))
	}
	return b
}

// Search returns the k best documents for the query tokens (each distinct
// token counted once), best first; ties go to the earlier document.
func (b *BM25) Search(query []string, k int) []Hit {
	if b.avgLen == 0 {
		return nil
	}
	n := float64(len(b.lengths))
	scores := map[int32]float64{}
	seen := map[string]bool{}
	for _, t := range query {
		if seen[t] {
			continue
		}
		seen[t] = true
		ps := b.postings[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := BM25K1 * (1 - BM25B + BM25B*b.lengths[p.doc]/b.avgLen)
			scores[p.doc] += idf * tf * (BM25K1 + 1) / (tf + norm)
		}
	}
	hits := make([]Hit, 0, len(scores))
	for d, s := range scores {
		hits = append(hits, Hit{int(d), s})
	}
	return best(hits, k, func(x, y Hit) int { return x.Doc - y.Doc })
}

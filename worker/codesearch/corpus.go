package codesearch

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// A Corpus is what both engines rank: documents (code chunks) as analysed
// terms. Ranking needs, per query term, the documents holding it with the
// term's frequency and the document's length, and the corpus's exact
// statistics. Keeping those behind one small interface lets a snapshot
// stored as a base plus an overlay (documents dropped, documents added)
// rank exactly as a corpus built for that snapshot alone.
type Corpus interface {
	// Stats are the corpus's figures the scores depend on.
	Stats() CorpusStats
	// df is the number of documents holding term.
	df(term string) int
	// each calls f for every document holding term (doc in the corpus's
	// own numbering), with the term's frequency there and the document's
	// length in tokens.
	each(term string, f func(doc int, freq, length uint32))
}

// CorpusStats are a corpus's figures that scores depend on.
type CorpusStats struct {
	Docs int // documents
	// Terms is the number of distinct terms: bleve's bm25 takes
	// ceil(Terms/Docs) as the average document length.
	Terms int
	// Tokens is the sum of the documents' lengths (the textbook average).
	Tokens int64
}

// bleve's bm25 constants (search.BM25_k1, search.BM25_b).
const (
	bleveK1 = 1.2
	bleveB  = 0.75
)

// rankBleve ranks c for the query's tokens as bleve's match query with the
// bm25 scoring model ranks a scorch index holding the same documents, with
// ties broken by the document's id as a string, as Search asks bleve to:
//
//   - one term query per token, duplicates included; with more than one, a
//     disjunction whose score is the sum of the matching terms' scores
//     times the share of the tokens that match (coord), each term's score
//     weighted by idf·queryNorm, queryNorm being 1/√Σ idf² over every
//     token. bleve orders the terms by document frequency, fewest first
//     (a stable sort at ten terms or fewer), and sums in that order: so do
//     these, since a float sum depends on its order;
//   - a term's score in a document: idf·√tf·k1 / (√tf + k1·(1 − b + b·len/avg)),
//     with idf = ln(1 + (N − df + 0.5)/(df + 0.5)), avg = ⌈distinct terms/N⌉,
//     and len read back from the float32 norm 1/√len that scorch stores.
//
// bleve sums the terms of a query of more than ten tokens in the order of a
// heap that depends on its segments' layout; those scores may differ from
// these in the last bits.
func rankBleve(c Corpus, query []string, k int) []Hit {
	st := c.Stats()
	if len(query) == 0 || st.Docs == 0 {
		return nil
	}
	avg := math.Ceil(float64(st.Terms) / float64(st.Docs))
	type term struct {
		text string
		df   int
		idf  float64
	}
	terms := make([]term, len(query))
	for i, t := range query {
		df := c.df(t)
		terms[i] = term{t, df, math.Log(1 + (float64(st.Docs)-float64(df)+0.5)/(float64(df)+0.5))}
	}
	slices.SortStableFunc(terms, func(a, b term) int { return a.df - b.df })
	sumSq := 0.0
	for _, t := range terms {
		sumSq += t.idf * t.idf
	}
	queryNorm := 1 / math.Sqrt(sumSq)
	type acc struct {
		sum     float64
		matched int
	}
	scores := map[int]*acc{}
	for _, t := range terms {
		idf := t.idf
		weight := 1.0
		if len(query) > 1 {
			weight = idf * queryNorm
		}
		c.each(t.text, func(doc int, freq, length uint32) {
			tf := math.Sqrt(float64(freq))
			norm := float64(float32(1 / math.Sqrt(float64(length))))
			fieldLength := 1 / (norm * norm)
			s := idf * (tf * bleveK1) / (tf + bleveK1*(1-bleveB+bleveB*fieldLength/avg))
			if weight != 1 {
				s *= weight
			}
			a := scores[doc]
			if a == nil {
				a = &acc{}
				scores[doc] = a
			}
			a.sum += s
			a.matched++
		})
	}
	hits := make([]Hit, 0, len(scores))
	for doc, a := range scores {
		s := a.sum
		if len(query) > 1 {
			s *= float64(a.matched) / float64(len(query))
		}
		hits = append(hits, Hit{Doc: doc, Score: s})
	}
	return best(hits, k, func(x, y Hit) int { return strings.Compare(strconv.Itoa(x.Doc), strconv.Itoa(y.Doc)) })
}

// rankTextbook ranks c for the query's distinct tokens with textbook
// Lucene BM25 (BM25.Search's scores and order).
func rankTextbook(c Corpus, query []string, k int) []Hit {
	st := c.Stats()
	if st.Docs == 0 || st.Tokens == 0 {
		return nil
	}
	n := float64(st.Docs)
	avgLen := float64(st.Tokens) / n
	scores := map[int]float64{}
	seen := map[string]bool{}
	for _, t := range query {
		if seen[t] {
			continue
		}
		seen[t] = true
		df := float64(c.df(t))
		if df == 0 {
			continue
		}
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		c.each(t, func(doc int, freq, length uint32) {
			tf := float64(freq)
			norm := BM25K1 * (1 - BM25B + BM25B*float64(length)/avgLen)
			scores[doc] += idf * tf * (BM25K1 + 1) / (tf + norm)
		})
	}
	hits := make([]Hit, 0, len(scores))
	for d, s := range scores {
		hits = append(hits, Hit{d, s})
	}
	return best(hits, k, func(x, y Hit) int { return x.Doc - y.Doc })
}

// best sorts hits by score, best first, ties by tie, and keeps k.
func best(hits []Hit, k int, tie func(x, y Hit) int) []Hit {
	slices.SortFunc(hits, func(x, y Hit) int {
		if x.Score != y.Score {
			if x.Score > y.Score {
				return -1
			}
			return 1
		}
		return tie(x, y)
	})
	return hits[:min(k, len(hits))]
}

// Rank returns the k best documents of c for the query's tokens with the
// engine's scoring (EngineBleve or EngineBM25), best first.
func Rank(engine string, c Corpus, query []string, k int) []Hit {
	if engine == EngineBM25 {
		return rankTextbook(c, query, k)
	}
	return rankBleve(c, query, k)
}

package codesearch

// RetrievalScore is how well one query retrieved the gold files.
type RetrievalScore struct {
	// Recall is the share of gold files among the files of the top-k chunks.
	Recall float64
	// RR is the reciprocal rank of the first chunk from a gold file (0 when
	// none is in the top k).
	RR float64
}

// ScoreRetrieval runs query on engine and scores the top-k chunks against
// the gold files.
func (ci *ChunkIndex) ScoreRetrieval(engine, query string, gold []string, k int) (RetrievalScore, error) {
	var sc RetrievalScore
	if len(gold) == 0 {
		return sc, nil
	}
	hits, err := ci.Search(engine, query, k)
	if err != nil {
		return sc, err
	}
	isGold := map[string]bool{}
	for _, f := range gold {
		isGold[f] = true
	}
	found := map[string]bool{}
	for rank, h := range hits {
		f := ci.Chunks[h.Doc].File
		if isGold[f] {
			found[f] = true
			if sc.RR == 0 {
				sc.RR = 1 / float64(rank+1)
			}
		}
	}
	sc.Recall = float64(len(found)) / float64(len(isGold))
	return sc, nil
}

package codesearch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// Overlay is a snapshot's corpus kept as a base corpus (the nearest
// snapshot of the repository already stored) with documents dropped and
// documents added. Its statistics — documents, distinct terms, tokens and
// every term's document frequency — are the snapshot's own, exactly, so
// that both engines rank it as they rank a corpus built for the snapshot
// alone (Zoekt's delta shards with tombstones, but with the corpus
// statistics made exact instead of left stale).
type Overlay struct {
	base  *Postings
	keep  []int32 // base document → snapshot document; -1 dropped
	added *Postings
	// addedAt numbers the added documents in the snapshot.
	addedAt []int32
	st      CorpusStats
	// dfs holds the frequency of every term whose frequency differs from
	// the base's (0 for a term the snapshot no longer has).
	dfs map[string]uint32
}

// NewOverlay makes the overlay whose documents are the base's documents
// that keep maps (to their number in the snapshot; -1: dropped) and the
// added documents, numbered by addedAt. Together the two numberings must
// cover 0..n−1 once each.
func NewOverlay(base *Postings, keep []int32, added *Postings, addedAt []int32) (*Overlay, error) {
	o := &Overlay{base: base, keep: keep, added: added, addedAt: addedAt, dfs: map[string]uint32{}}
	if err := o.checkNumbering(); err != nil {
		return nil, err
	}
	st := base.Stats()
	dropped := func(doc int) bool { return keep[doc] < 0 }
	for doc, to := range keep {
		if to < 0 {
			st.Docs--
			st.Tokens -= int64(base.lengths[doc])
		}
	}
	base.termsOf(dropped, func(term string) {
		if _, ok := o.dfs[term]; !ok {
			o.dfs[term] = uint32(base.df(term))
		}
		o.dfs[term]--
	})
	ast := added.Stats()
	st.Docs += ast.Docs
	st.Tokens += ast.Tokens
	for i, term := range added.terms {
		if _, ok := o.dfs[term]; !ok {
			o.dfs[term] = uint32(base.df(term))
		}
		o.dfs[term] += added.dfs[i]
	}
	for term, df := range o.dfs {
		was := base.df(term)
		switch {
		case int(df) == was:
			delete(o.dfs, term)
		case was == 0:
			st.Terms++
		case df == 0:
			st.Terms--
		}
	}
	o.st = st
	return o, nil
}

// checkNumbering refuses numberings that do not cover 0..n−1 once each.
func (o *Overlay) checkNumbering() error {
	n := len(o.addedAt) + countKept(o.keep)
	if len(o.addedAt) != len(o.added.lengths) {
		return fmt.Errorf("codesearch: %d added documents numbered, %d added", len(o.addedAt), len(o.added.lengths))
	}
	seen := make([]bool, n)
	for _, to := range slices.Concat(o.keep, o.addedAt) {
		switch {
		case to < 0:
		case int(to) >= n || seen[to]:
			return fmt.Errorf("codesearch: overlay numbering: document %d out of range or twice (of %d)", to, n)
		default:
			seen[to] = true
		}
	}
	return nil
}

const overlayMagic = "a2farm-overlay 1\n"

// Delta is what the overlay holds beyond its base, its added documents and
// their numbering: the snapshot's statistics and the frequencies that differ
// from the base's. It is small: its size follows what changed.
func (o *Overlay) Delta() []byte {
	b := append([]byte(nil), overlayMagic...)
	b = binary.AppendUvarint(b, uint64(o.st.Docs))
	b = binary.AppendUvarint(b, uint64(o.st.Terms))
	b = binary.AppendUvarint(b, uint64(o.st.Tokens))
	terms := make([]string, 0, len(o.dfs))
	for t := range o.dfs {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	b = binary.AppendUvarint(b, uint64(len(terms)))
	for _, t := range terms {
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
		b = binary.AppendUvarint(b, uint64(o.dfs[t]))
	}
	return b
}

// OpenOverlay is NewOverlay without its work: the statistics and
// frequencies are read from a stored Delta.
func OpenOverlay(base *Postings, keep []int32, added *Postings, addedAt []int32, delta []byte) (*Overlay, error) {
	if !bytes.HasPrefix(delta, []byte(overlayMagic)) {
		return nil, fmt.Errorf("%w: overlay without a header", errPostings)
	}
	o := &Overlay{base: base, keep: keep, added: added, addedAt: addedAt}
	if err := o.checkNumbering(); err != nil {
		return nil, err
	}
	r := reader{b: delta, i: len(overlayMagic)}
	o.st = CorpusStats{Docs: int(r.uvarint()), Terms: int(r.uvarint()), Tokens: int64(r.uvarint())}
	n := r.uvarint()
	if n > uint64(len(delta)) {
		return nil, fmt.Errorf("%w: overlay of %d terms", errPostings, n)
	}
	o.dfs = make(map[string]uint32, n)
	for range n {
		t := string(r.bytes(r.uvarint()))
		o.dfs[t] = uint32(r.uvarint())
	}
	if r.err != nil || r.i != len(delta) {
		return nil, fmt.Errorf("%w: overlay truncated", errPostings)
	}
	if want := len(o.addedAt) + countKept(o.keep); want != o.st.Docs {
		return nil, fmt.Errorf("%w: overlay of %d documents numbers %d", errPostings, o.st.Docs, want)
	}
	return o, nil
}

func countKept(keep []int32) int {
	n := 0
	for _, to := range keep {
		if to >= 0 {
			n++
		}
	}
	return n
}

// Bytes estimates the heap the overlay holds: its base's postings (read
// for it), its added documents, numbering and changed frequencies.
func (o *Overlay) Bytes() int64 {
	n := o.base.Bytes() + o.added.Bytes() + int64(4*(len(o.keep)+len(o.addedAt)))
	for t := range o.dfs {
		n += 48 + int64(len(t))
	}
	return n
}

// Stats are the snapshot's figures.
func (o *Overlay) Stats() CorpusStats { return o.st }

func (o *Overlay) df(term string) int {
	if df, ok := o.dfs[term]; ok {
		return int(df)
	}
	return o.base.df(term)
}

// each visits the base's documents still in the snapshot, then the added
// ones: ranking sums per document, so the order of documents is free.
func (o *Overlay) each(term string, f func(doc int, freq, length uint32)) {
	o.base.each(term, func(doc int, freq, length uint32) {
		if to := o.keep[doc]; to >= 0 {
			f(int(to), freq, length)
		}
	})
	o.added.each(term, func(doc int, freq, length uint32) { f(int(o.addedAt[doc]), freq, length) })
}

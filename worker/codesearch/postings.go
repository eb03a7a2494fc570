package codesearch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Postings is a corpus in the form it is stored in: per document its
// length in tokens; per term, in byte order, its document frequency and
// its postings (document, frequency) in document order. It is read in
// place: opening one decodes the term table only, and a term's postings
// are decoded when a query asks for them.
type Postings struct {
	data    []byte
	lengths []uint32
	tokens  int64
	terms   []string // sorted
	dfs     []uint32
	offsets []uint32 // of each term's postings in data
}

const postingsMagic = "a2farm-postings 1\n"

// NewPostings indexes documents given as token lists (Tokens of each
// chunk's text).
func NewPostings(docs [][]string) *Postings {
	type entry struct {
		doc  uint32
		freq uint32
	}
	byTerm := map[string][]entry{}
	freq := map[string]uint32{}
	lengths := make([]uint32, len(docs))
	for i, toks := range docs {
		clear(freq)
		for _, t := range toks {
			freq[t]++
		}
		for t, n := range freq {
			byTerm[t] = append(byTerm[t], entry{uint32(i), n})
		}
		lengths[i] = uint32(len(toks))
	}
	terms := make([]string, 0, len(byTerm))
	for t := range byTerm {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	var b []byte
	b = append(b, postingsMagic...)
	b = binary.AppendUvarint(b, uint64(len(lengths)))
	for _, l := range lengths {
		b = binary.AppendUvarint(b, uint64(l))
	}
	b = binary.AppendUvarint(b, uint64(len(terms)))
	var lists []byte
	for _, t := range terms {
		es := byTerm[t]
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
		b = binary.AppendUvarint(b, uint64(len(es)))
		b = binary.AppendUvarint(b, uint64(len(lists)))
		prev := uint32(0)
		for _, e := range es {
			lists = binary.AppendUvarint(lists, uint64(e.doc-prev))
			lists = binary.AppendUvarint(lists, uint64(e.freq))
			prev = e.doc
		}
	}
	b = binary.AppendUvarint(b, uint64(len(lists)))
	b = append(b, lists...)
	p, err := ReadPostings(b)
	if err != nil {
		panic(fmt.Sprintf("codesearch: postings just encoded do not decode: %v", err)) // a bug, caught by tests
	}
	return p
}

// Encoded is the stored form (what ReadPostings reads).
func (p *Postings) Encoded() []byte { return p.data }

// Bytes estimates the heap the postings hold: the stored form, the term
// table and the document lengths.
func (p *Postings) Bytes() int64 {
	n := int64(len(p.data) + 4*len(p.lengths))
	for _, t := range p.terms {
		n += 16 + 12 + int64(len(t))
	}
	return n
}

var errPostings = errors.New("codesearch: damaged postings")

// ReadPostings opens postings in their stored form; data is kept, not
// copied.
func ReadPostings(data []byte) (*Postings, error) {
	if !bytes.HasPrefix(data, []byte(postingsMagic)) {
		return nil, fmt.Errorf("%w: no header", errPostings)
	}
	r := reader{b: data, i: len(postingsMagic)}
	p := &Postings{data: data}
	n := r.uvarint()
	if n > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d documents", errPostings, n)
	}
	p.lengths = make([]uint32, n)
	for i := range p.lengths {
		p.lengths[i] = uint32(r.uvarint())
		p.tokens += int64(p.lengths[i])
	}
	nt := r.uvarint()
	if nt > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d terms", errPostings, nt)
	}
	p.terms, p.dfs, p.offsets = make([]string, nt), make([]uint32, nt), make([]uint32, nt)
	for i := range p.terms {
		p.terms[i] = string(r.bytes(r.uvarint()))
		p.dfs[i] = uint32(r.uvarint())
		p.offsets[i] = uint32(r.uvarint())
	}
	size := r.uvarint()
	if r.err != nil || uint64(len(data)-r.i) != size {
		return nil, fmt.Errorf("%w: truncated", errPostings)
	}
	base := uint32(r.i)
	for i := range p.offsets {
		p.offsets[i] += base
	}
	return p, nil
}

func (p *Postings) find(term string) (int, bool) {
	i := sort.SearchStrings(p.terms, term)
	return i, i < len(p.terms) && p.terms[i] == term
}

// Stats are the corpus's figures.
func (p *Postings) Stats() CorpusStats {
	return CorpusStats{Docs: len(p.lengths), Terms: len(p.terms), Tokens: p.tokens}
}

func (p *Postings) df(term string) int {
	if i, ok := p.find(term); ok {
		return int(p.dfs[i])
	}
	return 0
}

func (p *Postings) each(term string, f func(doc int, freq, length uint32)) {
	i, ok := p.find(term)
	if !ok {
		return
	}
	r := reader{b: p.data, i: int(p.offsets[i])}
	doc := uint32(0)
	for range p.dfs[i] {
		doc += uint32(r.uvarint())
		freq := uint32(r.uvarint())
		if r.err != nil || int(doc) >= len(p.lengths) {
			return // damaged: ReadPostings checked the frame, not every list
		}
		f(int(doc), freq, p.lengths[doc])
	}
}

// termsOf calls f for each term of the documents for which has is true,
// once per (term, document).
func (p *Postings) termsOf(has func(doc int) bool, f func(term string)) {
	for i, t := range p.terms {
		r := reader{b: p.data, i: int(p.offsets[i])}
		doc := uint32(0)
		for range p.dfs[i] {
			doc += uint32(r.uvarint())
			r.uvarint()
			if has(int(doc)) {
				f(t)
			}
		}
	}
}

// reader reads varints and byte strings, remembering the first error.
type reader struct {
	b   []byte
	i   int
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.i:])
	if n <= 0 {
		r.err = errPostings
		return 0
	}
	r.i += n
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)-r.i) {
		r.err = errPostings
		return nil
	}
	out := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return out
}

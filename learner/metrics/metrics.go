// Package metrics scores localization answers against gold locations: the
// reference's headline P/R/F1 at fixed cut-offs, ranking metrics (Acc@k,
// NDCG@k, MAP@k), the lenient matching the training reward uses, and the
// discovery–commit gap. Rewards and `a2farm eval` share these definitions.
package metrics

import (
	"github.com/a2farm/a2farm/lang"
	"math"
	"strings"
)

// Level is a location granularity.
type Level int

// Levels, in report order.
const (
	File Level = iota
	Module
	Function
)

// Levels lists every level.
var Levels = [...]Level{File, Module, Function}

func (l Level) String() string {
	return [...]string{"file", "module", "function"}[l]
}

// Cutoff is the reference's fixed k per level (file 5, module 10,
// function 10), used as the precision denominator of the headline metric.
func (l Level) Cutoff() int {
	if l == File {
		return 5
	}
	return 10
}

// PRF is precision, recall and F1.
type PRF struct{ P, R, F1 float64 }

func prf(p, r float64) PRF {
	if p+r == 0 {
		return PRF{p, r, 0}
	}
	return PRF{p, r, 2 * p * r / (p + r)}
}

// dedup keeps the first occurrence of each id.
func dedup(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// NormalizeFunctions maps function-level predictions to their canonical
// ids (Python strips a trailing ".__init__") and de-duplicates them, as the
// reference evaluation does (gold is left alone).
func NormalizeFunctions(pred []string, l *lang.Set) []string {
	out := make([]string, len(pred))
	for i, p := range pred {
		out[i] = l.CanonicalID(p)
	}
	return dedup(out)
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// AtK is the reference headline metric: hits among the first k predictions;
// P = hits/k (fixed denominator), R = hits/|gold|. Empty gold gives zeros.
func AtK(pred, gold []string, k int) PRF {
	if len(gold) == 0 || k <= 0 {
		return PRF{}
	}
	g := set(gold)
	hits := 0
	for i, p := range dedup(pred) {
		if i == k {
			break
		}
		if g[p] {
			hits++
		}
	}
	return prf(float64(hits)/float64(k), float64(hits)/float64(len(g)))
}

// Exact is P/R/F1 over all (de-duplicated) predictions with exact
// matching: P = hits/|pred|, R = hits/|gold|.
func Exact(pred, gold []string) PRF {
	pred = dedup(pred)
	if len(gold) == 0 || len(pred) == 0 {
		return PRF{}
	}
	g := set(gold)
	hits := 0
	for _, p := range pred {
		if g[p] {
			hits++
		}
	}
	return prf(float64(hits)/float64(len(pred)), float64(hits)/float64(len(g)))
}

// relevance marks which of the first k (de-duplicated) predictions are gold.
func relevance(pred, gold []string, k int) []bool {
	g := set(gold)
	pred = dedup(pred)
	rel := make([]bool, min(k, len(pred)))
	for i := range rel {
		rel[i] = g[pred[i]]
	}
	return rel
}

// AccAtK is 1 when the first k predictions hold min(|gold|, k) gold ids.
func AccAtK(pred, gold []string, k int) float64 {
	if len(gold) == 0 {
		return 0
	}
	hits := 0
	for _, r := range relevance(pred, gold, k) {
		if r {
			hits++
		}
	}
	if hits >= min(len(set(gold)), k) {
		return 1
	}
	return 0
}

// NDCGAtK uses log2(rank + 1) discounts and an ideal ranking with
// min(|gold|, k) gold ids first.
func NDCGAtK(pred, gold []string, k int) float64 {
	if len(gold) == 0 {
		return 0
	}
	dcg := 0.0
	for i, r := range relevance(pred, gold, k) {
		if r {
			dcg += 1 / math.Log2(float64(i+2))
		}
	}
	idcg := 0.0
	for i := range min(len(set(gold)), k) {
		idcg += 1 / math.Log2(float64(i+2))
	}
	return dcg / idcg
}

// MAPAtK sums precision at each relevant rank within the first k and
// divides by k, as the reference's ranking script does.
func MAPAtK(pred, gold []string, k int) float64 {
	if len(gold) == 0 || k <= 0 {
		return 0
	}
	sum, hits := 0.0, 0
	for i, r := range relevance(pred, gold, k) {
		if r {
			hits++
			sum += float64(hits) / float64(i+1)
		}
	}
	return sum / float64(k)
}

// LenientPRF is the training-time F1 (reference compute_prf): with no ":"
// on either side (files) sets match exactly; otherwise two ids match when
// equal, or when their files are equal and one name equals, prefixes (Foo
// vs Foo.bar) or suffixes (bar vs Foo.bar) the other. P counts predictions
// matching some gold id, R gold ids matched by some prediction.
func LenientPRF(pred, gold []string) PRF {
	pred, gold = dedup(pred), dedup(gold)
	if len(pred) == 0 || len(gold) == 0 {
		return PRF{}
	}
	match := func(a, b string) bool { return a == b }
	if strings.Contains(strings.Join(pred, ""), ":") || strings.Contains(strings.Join(gold, ""), ":") {
		match = lenientMatch
	}
	matchedPred := 0
	for _, p := range pred {
		for _, g := range gold {
			if match(p, g) {
				matchedPred++
				break
			}
		}
	}
	matchedGold := 0
	for _, g := range gold {
		for _, p := range pred {
			if match(p, g) {
				matchedGold++
				break
			}
		}
	}
	return prf(float64(matchedPred)/float64(len(pred)), float64(matchedGold)/float64(len(gold)))
}

func lenientMatch(a, b string) bool {
	if a == b {
		return true
	}
	fa, na, oka := strings.Cut(a, ":")
	fb, nb, okb := strings.Cut(b, ":")
	if !oka || !okb || fa != fb || na == "" || nb == "" {
		return false
	}
	return na == nb || strings.HasPrefix(na, nb+".") || strings.HasPrefix(nb, na+".") ||
		strings.HasSuffix(na, "."+nb) || strings.HasSuffix(nb, "."+na)
}

// Commitment compares what a trajectory discovered with what it answered,
// at one level: O = discovered ∩ gold; DC = |O ∩ committed| / |O| (0 when
// O is empty); Gap = discovery recall − committed recall; TypeB when some
// observed gold id was not committed.
type Commitment struct {
	DC    float64
	Gap   float64
	TypeB bool
}

// Commit computes the commitment statistics with exact matching.
func Commit(discovered, committed, gold []string) Commitment {
	g := set(gold)
	if len(g) == 0 {
		return Commitment{}
	}
	c := set(committed)
	observed, kept := 0, 0
	for id := range set(discovered) {
		if g[id] {
			observed++
			if c[id] {
				kept++
			}
		}
	}
	committedGold := 0
	for id := range c {
		if g[id] {
			committedGold++
		}
	}
	var out Commitment
	if observed > 0 {
		out.DC = float64(kept) / float64(observed)
	}
	out.Gap = float64(observed)/float64(len(g)) - float64(committedGold)/float64(len(g))
	out.TypeB = kept < observed
	return out
}

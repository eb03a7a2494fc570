package codegraph

import (
	"regexp"
	"slices"
	"strings"
)

var fuzzyWord = regexp.MustCompile(`\w+`)

// fuzzyProcess prepares a string as the reference's fuzzy search does:
// "_" and "-" become spaces, and the words are joined by single spaces
// (case is kept).
func fuzzyProcess(s string) string {
	s = strings.NewReplacer("_", " ", "-", " ").Replace(s)
	return strings.Join(fuzzyWord.FindAllString(s, -1), " ")
}

// indelRatio is rapidfuzz's ratio: 100 * (1 - indel distance / total
// length), the indel distance being len(a)+len(b)-2*LCS.
func indelRatio(a, b string) float64 {
	ra, rb := []rune(a), []rune(b)
	total := len(ra) + len(rb)
	if total == 0 {
		return 100
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			if ra[i-1] == rb[j-1] {
				cur[j] = prev[j-1] + 1
			} else {
				cur[j] = max(prev[j], cur[j-1])
			}
		}
		prev, cur = cur, prev
	}
	lcs := prev[len(rb)]
	return 100 * float64(2*lcs) / float64(total)
}

// TokenSetRatio is rapidfuzz's token_set_ratio on processed strings.
func TokenSetRatio(a, b string) float64 {
	ta, tb := wordSet(a), wordSet(b)
	if len(ta) == 0 || len(tb) == 0 {
		return 0
	}
	var inter, onlyA, onlyB []string
	for w := range ta {
		if tb[w] {
			inter = append(inter, w)
		} else {
			onlyA = append(onlyA, w)
		}
	}
	for w := range tb {
		if !ta[w] {
			onlyB = append(onlyB, w)
		}
	}
	if len(inter) > 0 && (len(onlyA) == 0 || len(onlyB) == 0) {
		return 100
	}
	slices.Sort(inter)
	slices.Sort(onlyA)
	slices.Sort(onlyB)
	sect := strings.Join(inter, " ")
	diffA := strings.Join(onlyA, " ")
	diffB := strings.Join(onlyB, " ")
	join := func(x, y string) string {
		if x == "" {
			return y
		}
		if y == "" {
			return x
		}
		return x + " " + y
	}
	combA, combB := join(sect, diffA), join(sect, diffB)
	best := indelRatio(combA, combB)
	if sect != "" {
		best = max(best, indelRatio(sect, combA), indelRatio(sect, combB))
	}
	return best
}

func wordSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(s) {
		out[w] = true
	}
	return out
}

// FuzzyNodes ranks file, class and function nodes (non-test; those in
// include first, when any match the filter) by token-set ratio with the
// query and returns the top k, ties in graph order.
func (g *Graph) FuzzyNodes(query string, include map[string]bool, k int) []NodeID {
	var all, filtered []NodeID
	for i, n := range g.Nodes {
		if IsTestID(n.ID) || n.Type == Directory {
			continue
		}
		all = append(all, NodeID(i))
		if include == nil || include[FileOfID(n.ID)] {
			filtered = append(filtered, NodeID(i))
		}
	}
	if len(filtered) == 0 {
		filtered = all
	}
	q := fuzzyProcess(query)
	type scoredNode struct {
		n     NodeID
		score float64
	}
	scored := make([]scoredNode, len(filtered))
	for i, n := range filtered {
		scored[i] = scoredNode{n, TokenSetRatio(q, fuzzyProcess(g.Nodes[n].ID))}
	}
	slices.SortStableFunc(scored, func(a, b scoredNode) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	out := make([]NodeID, 0, k)
	for i := 0; i < len(scored) && i < k; i++ {
		out = append(out, scored[i].n)
	}
	return out
}

// FileOfID is the file part of a node id.
func FileOfID(id string) string {
	f, _, _ := strings.Cut(id, ":")
	return f
}

package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Commit search settings (reference defaults).
const (
	commitTopK       = 5
	commitPatches    = 3  // commits shown with a patch excerpt
	commitPatchLines = 50 // lines per excerpt
	maxTopK          = 50
)

func commitTool() *Tool {
	return &Tool{
		Name: SearchCommit,
		Description: `Searches the repository's commit history (only commits up to the version being
inspected) for commits whose subject matches the query words. Shows each match's
id, subject, date, changed files and linked issues, with the diff of the best
three. Useful to see how similar problems were fixed before and which files
usually change together.`,
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","description":"Words to look for in commit subjects."},` +
			`"top_k":{"type":"integer","default":5,"description":"How many commits to return."}` +
			`},"required":["query"]}`),
		call: func(_ context.Context, s *Set, args json.RawMessage) (Result, error) {
			query, k, err := decodeQuery(args, commitTopK)
			if err != nil {
				return Result{}, err
			}
			return s.searchCommits(query, k), nil
		},
	}
}

// decodeQuery reads the {query, top_k} arguments shared by search_commit
// and search_summary.
func decodeQuery(args json.RawMessage, defaultK int) (string, int, error) {
	var a struct {
		Query *string `json:"query"`
		TopK  *int    `json:"top_k"`
	}
	if err := decode(args, &a); err != nil {
		return "", 0, err
	}
	if a.Query == nil {
		return "", 0, badArgs("`query` is required.")
	}
	k := defaultK
	if a.TopK != nil {
		k = *a.TopK
	}
	if k < 1 || k > maxTopK {
		return "", 0, badArgs("`top_k` must be between 1 and %d; got %d.", maxTopK, k)
	}
	return *a.Query, k, nil
}

// keywordScore is the reference's commit and summary ranking (called BM25
// there, but not BM25): the number of query words (lowercased, split on
// whitespace, repeats counted) found among the document's words, plus 2
// when the whole lowercased query appears in the space-joined words.
func keywordScore(query string, doc []string) int {
	set := make(map[string]bool, len(doc))
	for _, w := range doc {
		set[w] = true
	}
	q := strings.ToLower(query)
	score := 0
	for _, w := range strings.Fields(q) {
		if set[w] {
			score++
		}
	}
	if strings.Contains(strings.Join(doc, " "), q) {
		score += 2
	}
	return score
}

type scored struct {
	i     int
	score int
}

// rank keeps the top k documents with a positive score, best first, ties
// in document order.
func rank(n int, k int, score func(i int) int) []scored {
	var hits []scored
	for i := range n {
		if sc := score(i); sc > 0 {
			hits = append(hits, scored{i, sc})
		}
	}
	slices.SortStableFunc(hits, func(a, b scored) int { return b.score - a.score })
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

func (s *Set) searchCommits(query string, k int) Result {
	ci := s.idx.Commits
	if ci == nil || len(s.commits) == 0 {
		return Result{Observation: "No commit history available for this repository."}
	}
	hits := rank(len(s.commits), k, func(i int) int {
		return keywordScore(query, strings.Fields(strings.ToLower(s.commits[i].Subject)))
	})
	if len(hits) == 0 {
		return Result{Observation: fmt.Sprintf("No commits found matching '%s'.", query)}
	}
	var sf surfacer
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d commits matching '%s':\n", len(hits), query)
	for r, h := range hits {
		c := s.commits[h.i]
		fmt.Fprintf(&b, "\n--- Commit %d ---\n[%s] %s\n  Date: %s\n", r+1, c.Short(), c.Subject, c.Date)
		files := c.Files
		more := ""
		if len(files) > 5 {
			more = fmt.Sprintf(" ... (+%d more)", len(files)-5)
			files = files[:5]
		}
		fmt.Fprintf(&b, "  Files: %s%s\n", strings.Join(files, ", "), more)
		for _, f := range c.Files {
			if n, ok := s.idx.Graph.HasNode(f); ok {
				sf.add(s.idx.Graph, n)
			}
		}
		if len(c.Issues) > 0 {
			fmt.Fprintf(&b, "  Linked Issues: %s\n", strings.Join(c.Issues, ", "))
		}
		if r < commitPatches {
			if patch, total, ok := ci.Patch(c.SHA, commitPatchLines); ok {
				b.WriteString("  Changes:\n" + patch + "\n")
				if total > commitPatchLines {
					fmt.Fprintf(&b, "  ... (%d more lines; call get_entity_contents on the files for current code)\n", total-commitPatchLines)
				}
			}
		}
	}
	return Result{Observation: Cut(strings.TrimRight(b.String(), "\n"), ToolCap, toolCutSuffix), Surfaced: sf.loc}
}

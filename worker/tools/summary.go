package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// summaryTopK is the default of search_summary: the reference schema
// advertises 10 but its implementation uses 7 when the model omits top_k.
const summaryTopK = 7

func viewSummaryTool() *Tool {
	return &Tool{
		Name:        ViewSummary,
		Description: "Shows the short summary of one file (what it defines and what it is for). Give the path relative to the repository root; a partial path lists the files it may mean.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"file_path":{"type":"string","description":"File path relative to the repository root, e.g. 'pkg/core/models.py'."}` +
			`},"required":["file_path"]}`),
		call: func(_ context.Context, s *Set, args json.RawMessage) (Result, error) {
			var a struct {
				FilePath *string `json:"file_path"`
			}
			if err := decode(args, &a); err != nil {
				return Result{}, err
			}
			if a.FilePath == nil {
				return Result{}, badArgs("`file_path` is required.")
			}
			return s.viewSummary(*a.FilePath), nil
		},
	}
}

func searchSummaryTool() *Tool {
	return &Tool{
		Name:        SearchSummary,
		Description: "Finds files whose path or summary contains the query words, and shows each file's summary. Good for a first map of where a feature lives.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","description":"Words describing the functionality to find."},` +
			`"top_k":{"type":"integer","default":10,"description":"How many files to return."}` +
			`},"required":["query"]}`),
		call: func(_ context.Context, s *Set, args json.RawMessage) (Result, error) {
			query, k, err := decodeQuery(args, summaryTopK)
			if err != nil {
				return Result{}, err
			}
			return s.searchSummary(query, k), nil
		},
	}
}

func (s *Set) viewSummary(path string) Result {
	sum := s.idx.Summaries
	g := s.idx.Graph
	var sf surfacer
	if text, ok := sum.Text[path]; ok {
		if n, ok := g.HasNode(path); ok {
			sf.add(g, n)
		}
		return Result{Observation: fmt.Sprintf("Summary for `%s`:\n%s", path, text), Surfaced: sf.loc}
	}
	var similar []string
	if path != "" {
		for _, p := range sum.Paths {
			if strings.Contains(p, path) || strings.HasSuffix(p, path) {
				similar = append(similar, p)
				if len(similar) == 5 {
					break
				}
			}
		}
	}
	if len(similar) == 0 {
		return Result{Observation: fmt.Sprintf("File '%s' not found in summaries.", path)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "No exact match for '%s'. Similar files:\n", path)
	for _, p := range similar {
		fmt.Fprintf(&b, "  - %s\n", p)
		if n, ok := g.HasNode(p); ok {
			sf.add(g, n)
		}
	}
	return Result{Observation: strings.TrimRight(b.String(), "\n"), Surfaced: sf.loc}
}

func (s *Set) searchSummary(query string, k int) Result {
	sum := s.idx.Summaries
	g := s.idx.Graph
	hits := rank(len(sum.Paths), k, func(i int) int {
		p := sum.Paths[i]
		return keywordScore(query, strings.Fields(strings.ToLower(p+" "+sum.Text[p])))
	})
	if len(hits) == 0 {
		return Result{Observation: fmt.Sprintf("No files found matching '%s'.", query)}
	}
	var sf surfacer
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d files matching '%s':\n\n", len(hits), query)
	for _, h := range hits {
		p := sum.Paths[h.i]
		fmt.Fprintf(&b, "`%s`\n    %s\n\n", p, sum.Text[p])
		if n, ok := g.HasNode(p); ok {
			sf.add(g, n)
		}
	}
	b.WriteString("Use view_summary for one file, or get_entity_contents to read its code.")
	return Result{Observation: b.String(), Surfaced: sf.loc}
}

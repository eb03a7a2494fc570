package summary

import (
	"encoding/json"
	"fmt"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/history"
	"os"
	"strings"
)

// Summaries maps file paths to short descriptions of the files.
type Summaries struct {
	// Paths are the summarized files, in graph order.
	Paths []string
	Text  map[string]string
}

// Structural summary limits (reference §B.6).
const (
	summaryMaxClasses   = 15
	summaryMaxFunctions = 15
	summaryMaxImports   = 10
)

// LoadSummaryFile reads a prebuilt {file_path: summary} JSON object.
func LoadSummaryFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("summaries %s: want a JSON object of strings: %w", path, err)
	}
	return m, nil
}

// BuildSummaries gives every non-test file of the graph a summary: the
// prebuilt one when given, else a structural one ("Classes: ... |
// Functions: ... | Imports: ... | Edits: N commits"). Unlike the reference,
// files missing from a prebuilt table still get the structural summary.
func BuildSummaries(g *codegraph.Graph, commits *history.CommitIndex, prebuilt map[string]string) *Summaries {
	edits := map[string]int{}
	if commits != nil {
		for _, c := range commits.Commits {
			for _, f := range c.Files {
				edits[f]++
			}
		}
	}
	s := &Summaries{Text: map[string]string{}}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.Type != codegraph.File || codegraph.IsTestID(n.ID) {
			continue
		}
		s.Paths = append(s.Paths, n.ID)
		if text, ok := prebuilt[n.ID]; ok && strings.TrimSpace(text) != "" {
			s.Text[n.ID] = strings.TrimSpace(text)
			continue
		}
		s.Text[n.ID] = structuralSummary(g, codegraph.NodeID(i), edits[n.ID])
	}
	return s
}

func structuralSummary(g *codegraph.Graph, file codegraph.NodeID, edits int) string {
	var classes, functions, imports []string
	seenImport := map[string]bool{}
	for _, e := range g.Out(file) {
		dst := g.Node(e.Dst)
		switch {
		case e.Type == codegraph.Contains && dst.Type == codegraph.Class:
			classes = append(classes, codegraph.ShortName(dst.ID))
		case e.Type == codegraph.Contains && dst.Type == codegraph.Function:
			functions = append(functions, codegraph.ShortName(dst.ID))
		case e.Type == codegraph.Imports:
			f := g.FilePath(e.Dst)
			if f != "" && !seenImport[f] {
				seenImport[f] = true
				imports = append(imports, f)
			}
		}
	}
	var parts []string
	add := func(label string, names []string, limit int) {
		if len(names) == 0 {
			return
		}
		if len(names) > limit {
			names = names[:limit]
		}
		parts = append(parts, label+": "+strings.Join(names, ", "))
	}
	add("Classes", classes, summaryMaxClasses)
	add("Functions", functions, summaryMaxFunctions)
	add("Imports", imports, summaryMaxImports)
	if edits > 0 {
		parts = append(parts, fmt.Sprintf("Edits: %d commits", edits))
	}
	if len(parts) == 0 {
		return "No structural info available"
	}
	return strings.Join(parts, " | ")
}

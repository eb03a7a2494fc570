package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

func entityTool() *Tool {
	return &Tool{
		Name: GetEntityContents,
		Description: `Returns the full source of files, classes or functions by their ids.

Name a class or function as file_path:QualifiedName (for example
"pkg/utils/math.py:Calculator.add") and a file by its path ("pkg/utils/math.py").
The code comes with line numbers.`,
		Parameters: json.RawMessage(`{"type":"object","properties":{"entity_names":{"type":"array","items":{"type":"string"},` +
			`"description":"Ids to fetch: 'file_path:QualifiedName' for a class or function, or a file path."}},"required":["entity_names"]}`),
		call: func(_ context.Context, s *Set, args json.RawMessage) (Result, error) {
			var a struct {
				EntityNames *[]string `json:"entity_names"`
			}
			if err := decode(args, &a); err != nil {
				return Result{}, err
			}
			if a.EntityNames == nil {
				return Result{}, badArgs("`entity_names` is required.")
			}
			if len(*a.EntityNames) > MaxListArgs {
				return Result{}, badArgs("`entity_names` has %d entries; at most %d are allowed per call.", len(*a.EntityNames), MaxListArgs)
			}
			return s.entityContents(*a.EntityNames), nil
		},
	}
}

func (s *Set) entityContents(names []string) Result {
	g := s.idx.Graph
	var sf surfacer
	var b strings.Builder
	for _, raw := range names {
		name := strings.Trim(strings.TrimSpace(raw), ".")
		if name == "" {
			continue
		}
		fmt.Fprintf(&b, "##Searching for entity `%s`...\n### Search Result:\n", name)
		n, ok := g.HasNode(name)
		if !ok {
			b.WriteString("Invalid name. \nHint: Valid entity name should be formatted as \"file_path:QualifiedName\" or just \"file_path\".")
			if hint := pathHint(name); hint != "" {
				b.WriteString("\n" + hint)
			}
			b.WriteString("\n\n")
			continue
		}
		fmt.Fprintf(&b, "Found %s `%s`.\nSource: Exact match found for entity name `%s`.\n", g.Node(n).Type, name, name)
		if code, ok := g.Render(n); ok {
			b.WriteString(code + "\n")
		}
		b.WriteString("\n\n")
		sf.add(g, n)
	}
	return Result{Observation: Cut(strings.TrimSpace(b.String()), ToolCap, toolCutSuffix), Surfaced: sf.loc}
}

// pathHint explains ids that can never name a repository entity.
func pathHint(name string) string {
	file, _, _ := strings.Cut(name, ":")
	switch {
	case strings.Contains("/"+file+"/", "/../"):
		return "Paths must stay inside the repository; \"..\" is not allowed."
	case strings.HasPrefix(file, "/"):
		return "Paths are relative to the repository root; drop the leading \"/\"."
	}
	return ""
}

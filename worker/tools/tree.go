package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/a2farm/a2farm/worker/codegraph"
)

// MaxTraversalDepth caps traversal_depth; -1 means this cap.
const MaxTraversalDepth = 20

func treeTool() *Tool {
	return &Tool{
		Name: ExploreTreeStructure,
		Description: `Walks the repository's code graph from the given entities and prints the
dependency tree around them.

Graph: entity types are 'directory', 'file', 'class' and 'function'; dependency
types are 'contains' (directories hold files, files hold classes and functions,
classes hold methods and inner classes, functions hold inner functions),
'imports', 'invokes' (calls made in a class's __init__ count for the class)
and 'inherits'. Entity ids are file paths, directory paths, or
file_path:QualifiedName (e.g. "pkg/a.py:A.method.inner").

'downstream' follows what the entities depend on or contain; 'upstream' shows
who depends on them ("invoked-by" style edges); 'both' does both from the
start entities. Example: start_entities=["/"], traversal_depth=2,
dependency_type_filter=["contains"] shows the top of the repository layout.`,
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"start_entities":{"type":"array","items":{"type":"string"},"description":"Entities to start from: directory or file paths, or 'file_path:QualifiedName' for classes and functions."},` +
			`"direction":{"type":"string","enum":["upstream","downstream","both"],"default":"downstream","description":"Which way to traverse the dependency edges."},` +
			`"traversal_depth":{"type":"integer","default":2,"description":"How many edges deep to go; -1 means unlimited (capped at 20). Must be -1 or >= 0."},` +
			`"entity_type_filter":{"type":["array","null"],"items":{"type":"string"},"description":"Entity types to include ('directory', 'file', 'class', 'function'); null includes all."},` +
			`"dependency_type_filter":{"type":["array","null"],"items":{"type":"string"},"description":"Dependency types to follow ('contains', 'imports', 'invokes', 'inherits'); null follows all."}` +
			`},"required":["start_entities"]}`),
		call: func(_ context.Context, s *Set, args json.RawMessage) (Result, error) {
			var a struct {
				StartEntities  *[]string `json:"start_entities"`
				Direction      *string   `json:"direction"`
				TraversalDepth *int      `json:"traversal_depth"`
				EntityTypes    *[]string `json:"entity_type_filter"`
				EdgeTypes      *[]string `json:"dependency_type_filter"`
			}
			if err := decode(args, &a); err != nil {
				return Result{}, err
			}
			q := treeQuery{direction: "downstream", depth: 2}
			if a.StartEntities == nil {
				return Result{}, badArgs("`start_entities` is required.")
			}
			if len(*a.StartEntities) > MaxListArgs {
				return Result{}, badArgs("`start_entities` has %d entries; at most %d are allowed per call.", len(*a.StartEntities), MaxListArgs)
			}
			if a.Direction != nil {
				q.direction = *a.Direction
			}
			if q.direction != "downstream" && q.direction != "upstream" && q.direction != "both" {
				return Result{}, badArgs("`direction` must be one of 'downstream', 'upstream' and 'both'; got '%s'.", q.direction)
			}
			if a.TraversalDepth != nil {
				q.depth = *a.TraversalDepth
			}
			if q.depth < -1 {
				return Result{}, badArgs("`traversal_depth` must be -1 (unlimited) or a non-negative integer; got %d.", q.depth)
			}
			if q.depth == -1 || q.depth > MaxTraversalDepth {
				q.depth = MaxTraversalDepth
			}
			if a.EntityTypes != nil {
				q.nodeTypes = map[codegraph.NodeType]bool{}
				for _, t := range *a.EntityTypes {
					// Unknown entity types simply match nothing, as in the reference.
					if nt, ok := codegraph.ParseNodeType(t); ok {
						q.nodeTypes[nt] = true
					}
				}
			}
			if a.EdgeTypes != nil {
				q.edgeTypes = map[codegraph.EdgeType]bool{}
				var bad []string
				for _, t := range *a.EdgeTypes {
					et, ok := codegraph.ParseEdgeType(t)
					if !ok {
						bad = append(bad, "'"+t+"'")
						continue
					}
					q.edgeTypes[et] = true
				}
				if len(bad) > 0 {
					return Result{}, badArgs("unknown dependency types %s in `dependency_type_filter`; use 'contains', 'imports', 'invokes' or 'inherits'.", strings.Join(bad, ", "))
				}
			}
			return s.exploreTree(*a.StartEntities, q), nil
		},
	}
}

type treeQuery struct {
	direction string
	depth     int
	nodeTypes map[codegraph.NodeType]bool // nil: all
	edgeTypes map[codegraph.EdgeType]bool // nil: all
}

func (s *Set) exploreTree(starts []string, q treeQuery) Result {
	g := s.idx.Graph
	var sf surfacer
	var trees []string
	var hints strings.Builder
	for _, root := range starts {
		if root != "/" {
			root = strings.Trim(root, "/")
		}
		root = g.Languages().CanonicalID(root)
		n, ok := g.Lookup(root)
		switch {
		case !ok:
			cands := s.candidates(root, 5)
			if len(cands) == 0 {
				fmt.Fprintf(&hints, "The entity name `%s` is invalid. There are no possible candidate entities in record.\n", root)
				continue
			}
			fmt.Fprintf(&hints, "The entity name `%s` is invalid. Based on your input, here are some candidate entities you might be referring to:\n", root)
			for _, c := range cands {
				fmt.Fprintf(&hints, "%s: `%s`\n", g.Node(c).Type, g.Node(c).ID)
				sf.add(g, c)
			}
			hints.WriteString("Source: Retrieved entity using keyword search (bm25).\n\n")
		case codegraph.IsTestID(root):
			fmt.Fprintf(&hints, "No results for the test entity: `%s`. Please do not include any test entities.\n\n", root)
		default:
			trees = append(trees, s.tree(n, q, &sf))
		}
	}
	out := strings.Join(trees, "\n\n")
	if h := hints.String(); strings.TrimSpace(h) != "" {
		out += "\n\n" + h
	}
	return Result{Observation: strings.TrimSpace(out), Surfaced: sf.loc}
}

// tree renders one depth-first traversal as the reference does: each
// (source, type, target) edge at most once per tree, a node seen before is
// printed but not expanded, and nodes deeper than the depth are not shown.
func (s *Set) tree(root codegraph.NodeID, q treeQuery, sf *surfacer) string {
	g := s.idx.Graph
	var lines []string
	expanded := map[codegraph.NodeID]bool{}
	type edgeKey struct {
		src, dst codegraph.NodeID
		t        codegraph.EdgeType
	}
	seenEdges := map[edgeKey]bool{}
	type child struct {
		node     codegraph.NodeID
		label    string
		upstream bool
	}
	var visit func(n codegraph.NodeID, prefix string, last bool, level int, label string, upstream bool)
	visit = func(n codegraph.NodeID, prefix string, last bool, level int, label string, upstream bool) {
		if level > q.depth {
			return
		}
		var childPrefix string
		if level == 0 {
			lines = append(lines, g.Node(n).ID)
		} else {
			connector := "├── "
			if last {
				connector = "└── "
			}
			connector += label + " ── "
			lines = append(lines, prefix+connector+g.Node(n).ID)
			bar := "│"
			if last {
				bar = " "
			}
			childPrefix = prefix + bar + strings.Repeat(" ", utf8.RuneCountInString(connector)-1)
		}
		sf.add(g, n)
		if expanded[n] {
			return
		}
		expanded[n] = true
		var children []child
		collect := func(up bool) {
			for _, nb := range g.Neighbours(n, up) {
				if q.nodeTypes != nil && !q.nodeTypes[g.Node(nb.Node).Type] {
					continue
				}
				if codegraph.IsTestID(g.Node(nb.Node).ID) {
					continue
				}
				for _, t := range nb.Types {
					if q.edgeTypes != nil && !q.edgeTypes[t] {
						continue
					}
					key := edgeKey{n, nb.Node, t}
					if up {
						key = edgeKey{nb.Node, n, t}
					}
					if seenEdges[key] {
						continue
					}
					seenEdges[key] = true
					label := t.String()
					if up {
						label += "-by"
					}
					children = append(children, child{nb.Node, label, up})
				}
			}
		}
		isRoot := level == 0
		if (isRoot && (q.direction == "downstream" || q.direction == "both")) || (!isRoot && !upstream) {
			collect(false)
		}
		if (isRoot && (q.direction == "upstream" || q.direction == "both")) || (!isRoot && upstream) {
			collect(true)
		}
		for i, c := range children {
			visit(c.node, childPrefix, i == len(children)-1, level+1, c.label, c.upstream)
		}
	}
	visit(root, "", false, 0, "", q.direction == "upstream")
	return strings.Join(lines, "\n")
}

// candidates suggests nodes for an unknown id: the BM25 node-id search,
// as the reference does.
func (s *Set) candidates(query string, limit int) []codegraph.NodeID {
	hits := s.idx.Nodes.Search(query, bm25TopK)
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

package codegraph

import (
	"strings"
	"sync"

	"github.com/a2farm/a2farm/lang"
)

// The graph's vocabulary is the neutral code model of package lang.
type (
	NodeType = lang.NodeType
	EdgeType = lang.EdgeType
	NodeID   = lang.NodeID
	Node     = lang.Node
	Edge     = lang.Edge
)

// Node and edge types, as the reference names them.
const (
	Directory = lang.Directory
	File      = lang.FileNode
	Class     = lang.Class
	Function  = lang.Function

	Contains = lang.Contains
	Imports  = lang.Imports
	Invokes  = lang.Invokes
	Inherits = lang.Inherits
)

// ParseNodeType accepts a reference node-type name.
func ParseNodeType(s string) (NodeType, bool) { return lang.ParseNodeType(s) }

// ParseEdgeType accepts a reference edge-type name.
func ParseEdgeType(s string) (EdgeType, bool) { return lang.ParseEdgeType(s) }

// Graph is the code graph of one snapshot. It is immutable once built and
// safe for concurrent readers.
type Graph struct {
	lang.Graph
	langs  *lang.Set
	files  []SourceFile
	parsed []*lang.File // aligned with files; nil where parsing failed
	// sources reads contents and parse results on demand for a graph read
	// back from disk (ReadGraph), whose files and parsed are then empty.
	sources Sources

	namesOnce sync.Once
	names     *NameTable
}

func newGraph(langs *lang.Set, files []SourceFile) *Graph {
	return &Graph{Graph: *lang.NewGraph(), langs: langs, files: files}
}

// Files are the source files the graph was built from, sorted by path;
// for a graph read back from disk their Content is nil (see Content).
func (g *Graph) Files() []SourceFile { return g.files }

// Languages are the languages the graph's files were read with, each file
// by its own.
func (g *Graph) Languages() *lang.Set { return g.langs }

// Node returns a node by index.
func (g *Graph) Node(n NodeID) *Node { return &g.Nodes[n] }

// Code returns a node's source: a whole file, or a definition from its
// `def`/`class` keyword to its last line; "" for directories.
func (g *Graph) Code(n NodeID) string {
	node := &g.Nodes[n]
	if node.FileIndex < 0 {
		return ""
	}
	c := g.content(node.FileIndex)
	if int(node.EndByte) > len(c) || node.StartByte > node.EndByte {
		return ""
	}
	return string(c[node.StartByte:node.EndByte])
}

// FilePath returns the path of the file a node belongs to ("" for
// directories).
func (g *Graph) FilePath(n NodeID) string {
	node := &g.Nodes[n]
	if node.FileIndex < 0 {
		return ""
	}
	return g.files[node.FileIndex].Path
}

// Out returns the edges leaving n, in insertion order.
func (g *Graph) Out(n NodeID) []Edge { return g.edges(g.OutEdges(n)) }

// In returns the edges entering n, in insertion order.
func (g *Graph) In(n NodeID) []Edge { return g.edges(g.InEdges(n)) }

func (g *Graph) edges(idx []lang.EdgeID) []Edge {
	out := make([]Edge, len(idx))
	for i, e := range idx {
		out[i] = g.Edges[e]
	}
	return out
}

// ShortName is the reference's name key of a node: the last dotted segment
// after the last colon. For a file "pkg/mod.py" that is "py".
func ShortName(id string) string { return lang.ShortName(id) }

// IsTestID is the reference's test predicate: the part of an id before ":",
// lowercased and split on space, "_" and "/", has a piece starting with
// "test".
func IsTestID(id string) bool {
	file, _, _ := strings.Cut(id, ":")
	for _, piece := range strings.FieldsFunc(strings.ToLower(file), func(r rune) bool {
		return r == ' ' || r == '_' || r == '/'
	}) {
		if strings.HasPrefix(piece, "test") {
			return true
		}
	}
	return false
}

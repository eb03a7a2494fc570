package codegraph

import (
	"fmt"
	"strings"
	"sync"

	"github.com/a2farm/a2farm/internal/lang"
)

// NodeType is the kind of a code-graph node.
type NodeType uint8

// Node types, as the reference names them.
const (
	Directory NodeType = iota + 1
	File
	Class
	Function
)

var nodeTypeNames = [...]string{Directory: "directory", File: "file", Class: "class", Function: "function"}

func (t NodeType) String() string {
	if int(t) < len(nodeTypeNames) && nodeTypeNames[t] != "" {
		return nodeTypeNames[t]
	}
	return fmt.Sprintf("NodeType(%d)", t)
}

// ParseNodeType accepts a reference node-type name.
func ParseNodeType(s string) (NodeType, bool) {
	for t, name := range nodeTypeNames {
		if name != "" && name == s {
			return NodeType(t), true
		}
	}
	return 0, false
}

// EdgeType is the kind of a code-graph edge.
type EdgeType uint8

// Edge types, as the reference names them.
const (
	Contains EdgeType = iota + 1
	Imports
	Invokes
	Inherits
)

var edgeTypeNames = [...]string{Contains: "contains", Imports: "imports", Invokes: "invokes", Inherits: "inherits"}

func (t EdgeType) String() string {
	if int(t) < len(edgeTypeNames) && edgeTypeNames[t] != "" {
		return edgeTypeNames[t]
	}
	return fmt.Sprintf("EdgeType(%d)", t)
}

// ParseEdgeType accepts a reference edge-type name.
func ParseEdgeType(s string) (EdgeType, bool) {
	for t, name := range edgeTypeNames {
		if name != "" && name == s {
			return EdgeType(t), true
		}
	}
	return 0, false
}

// NodeID indexes Graph.Nodes.
type NodeID int32

// Node is a directory, file, class or function.
type Node struct {
	ID   string
	Type NodeType
	// StartLine and EndLine are 1-based and inclusive; a file spans all its
	// lines, a directory none.
	StartLine, EndLine int
	// file indexes the graph's files (-1 for directories); code is
	// content[start:end] of that file.
	file       int32
	start, end uint32
}

// Edge is a typed, directed edge. The graph is a multigraph: the same pair
// may be linked several times, with the same type or not.
type Edge struct {
	Src, Dst NodeID
	Type     EdgeType
	// Alias is the `as` name of an import edge, "" when none.
	Alias string
}

// Graph is the code graph of one snapshot. It is immutable once built and
// safe for concurrent readers.
type Graph struct {
	Nodes  []Node
	Edges  []Edge
	lang   lang.Language
	files  []SourceFile
	parsed []*lang.File // aligned with files; nil where parsing failed
	index  map[string]NodeID
	out    [][]int32 // node -> edge indexes, insertion order
	in     [][]int32

	namesOnce sync.Once
	names     *NameTable
}

func newGraph(l lang.Language, files []SourceFile) *Graph {
	return &Graph{lang: l, files: files, index: map[string]NodeID{}}
}

// Files are the source files the graph was built from, sorted by path.
func (g *Graph) Files() []SourceFile { return g.files }

// Language is the language the graph's files were parsed as.
func (g *Graph) Language() lang.Language { return g.lang }

// Lookup returns the node with the given id.
func (g *Graph) Lookup(id string) (NodeID, bool) {
	n, ok := g.index[id]
	return n, ok
}

// Node returns a node by index.
func (g *Graph) Node(n NodeID) *Node { return &g.Nodes[n] }

// Code returns a node's source: a whole file, or a definition from its
// `def`/`class` keyword to its last line; "" for directories.
func (g *Graph) Code(n NodeID) string {
	node := &g.Nodes[n]
	if node.file < 0 {
		return ""
	}
	return string(g.files[node.file].Content[node.start:node.end])
}

// FilePath returns the path of the file a node belongs to ("" for
// directories).
func (g *Graph) FilePath(n NodeID) string {
	node := &g.Nodes[n]
	if node.file < 0 {
		return ""
	}
	return g.files[node.file].Path
}

// Out returns the edges leaving n, in insertion order.
func (g *Graph) Out(n NodeID) []Edge { return g.edges(g.out[n]) }

// In returns the edges entering n, in insertion order.
func (g *Graph) In(n NodeID) []Edge { return g.edges(g.in[n]) }

func (g *Graph) edges(idx []int32) []Edge {
	out := make([]Edge, len(idx))
	for i, e := range idx {
		out[i] = g.Edges[e]
	}
	return out
}

// addNode adds a node, or updates the attributes of an existing one (the
// reference builder re-adds a node when a file defines a name twice, and
// the later definition wins).
func (g *Graph) addNode(n Node) NodeID {
	if id, ok := g.index[n.ID]; ok {
		g.Nodes[id] = n
		return id
	}
	id := NodeID(len(g.Nodes))
	g.Nodes = append(g.Nodes, n)
	g.index[n.ID] = id
	g.out = append(g.out, nil)
	g.in = append(g.in, nil)
	return id
}

func (g *Graph) addEdge(src, dst NodeID, t EdgeType, alias string) {
	i := int32(len(g.Edges))
	g.Edges = append(g.Edges, Edge{Src: src, Dst: dst, Type: t, Alias: alias})
	g.out[src] = append(g.out[src], i)
	g.in[dst] = append(g.in[dst], i)
}

// removeNode is not needed: directories are only added when they hold
// source files, which is what the reference's removal pass leaves.

// ShortName is the reference's name key of a node: the last dotted segment
// after the last colon. For a file "pkg/mod.py" that is "py".
func ShortName(id string) string {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		id = id[i+1:]
	}
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		id = id[i+1:]
	}
	return id
}

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

package lang

import (
	"fmt"
	"strings"
)

// NodeType is the kind of a code-graph node.
type NodeType uint8

// Node types, as the reference names them.
const (
	Directory NodeType = iota + 1
	FileNode
	Class
	Function
)

var nodeTypeNames = [...]string{Directory: "directory", FileNode: "file", Class: "class", Function: "function"}

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

// EdgeID indexes Graph.Edges.
type EdgeID int32

// Node is a directory, file, class or function.
type Node struct {
	ID   string
	Type NodeType
	// StartLine and EndLine are 1-based and inclusive; a file spans all its
	// lines, a directory none.
	StartLine, EndLine int
	// FileIndex indexes the snapshot's files (-1 for directories); the
	// node's code is Content[StartByte:EndByte] of that file.
	FileIndex          int32
	StartByte, EndByte uint32
}

// Edge is a typed, directed edge. The graph is a multigraph: the same pair
// may be linked several times, with the same type or not.
type Edge struct {
	Src, Dst NodeID
	Type     EdgeType
	// Alias is the `as` name of an import edge, "" when none.
	Alias string
}

// Graph is the neutral code graph of one snapshot: nodes for directories,
// files and definitions, typed edges between them, in insertion order.
// The code graph builder adds the nodes and contains edges; each language
// links its own files with imports, invokes and inherits edges (Link).
type Graph struct {
	Nodes []Node
	Edges []Edge
	// Project holds, while the languages link, the contents of the files
	// they asked for beside their sources (ProjectFiler), by path.
	Project map[string][]byte
	index   map[string]NodeID
	out     [][]EdgeID // node -> edges leaving it, insertion order
	in      [][]EdgeID
}

// NewGraph returns an empty graph.
func NewGraph() *Graph { return &Graph{index: map[string]NodeID{}} }

// Lookup returns the node with the given id.
func (g *Graph) Lookup(id string) (NodeID, bool) {
	n, ok := g.index[id]
	return n, ok
}

// OutEdges returns the ids of the edges leaving n, in insertion order; the
// slice is the graph's own, not to be changed.
func (g *Graph) OutEdges(n NodeID) []EdgeID { return g.out[n] }

// InEdges returns the ids of the edges entering n, in insertion order; the
// slice is the graph's own, not to be changed.
func (g *Graph) InEdges(n NodeID) []EdgeID { return g.in[n] }

// AddNode adds a node, or updates the attributes of an existing one (the
// reference builder re-adds a node when a file defines a name twice, and
// the later definition wins).
func (g *Graph) AddNode(n Node) NodeID {
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

// AddEdge adds an edge.
func (g *Graph) AddEdge(src, dst NodeID, t EdgeType, alias string) {
	i := EdgeID(len(g.Edges))
	g.Edges = append(g.Edges, Edge{Src: src, Dst: dst, Type: t, Alias: alias})
	g.out[src] = append(g.out[src], i)
	g.in[dst] = append(g.in[dst], i)
}

// Unit is one file of a language as Link sees it: its node, its parse and
// the nodes of its definitions.
type Unit struct {
	Path string
	// FileIndex is the file's place among the snapshot's files
	// (Node.FileIndex).
	FileIndex int
	Node      NodeID
	// Parsed is the file's structure; nil when it could not be parsed.
	Parsed *File
	// OK is false when the language did not trust the parse
	// (Definitions said so): the file is a node of its own, unlinked.
	OK bool
	// Definitions are the file's graph definitions and DefNodes their
	// nodes, aligned.
	Definitions []Definition
	DefNodes    []NodeID
}

// Definition is a definition that is a node of the code graph.
type Definition struct {
	Def *Def
	// Parent is the QualName of the definition node that contains it, ""
	// when the file does.
	Parent string
}

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

package codegraph

import (
	"fmt"
	"strings"
)

// HasNode is the tools' node test: the id exists and is not in a test
// file (test nodes are invisible to every lookup).
func (g *Graph) HasNode(id string) (NodeID, bool) {
	if IsTestID(id) {
		return 0, false
	}
	return g.Lookup(id)
}

// Lines returns the first and last line a node's code is shown with: a
// definition's own span; for a file, 1 to the number of "\n"-separated
// pieces of its content (so a final newline shows as an empty last line,
// as the reference renders files).
func (g *Graph) Lines(n NodeID) (start, end int) {
	node := &g.Nodes[n]
	switch node.Type {
	case File:
		return 1, strings.Count(g.Code(n), "\n") + 1
	case Class, Function:
		return node.StartLine, node.EndLine
	}
	return 0, 0
}

// Render returns the node's code in a fenced block with right-aligned line
// numbers ("12 | code"); ok is false for nodes without code (directories,
// empty files).
func (g *Graph) Render(n NodeID) (string, bool) {
	code := g.Code(n)
	if code == "" {
		return "", false
	}
	start, _ := g.Lines(n)
	return NumberLines(strings.Split(code, "\n"), start), true
}

// NumberLines fences lines numbered from start, each number padded to the
// width of the largest one.
func NumberLines(lines []string, start int) string {
	width := len(fmt.Sprint(start + len(lines) - 1))
	var b strings.Builder
	b.WriteString("```\n")
	for i, l := range lines {
		fmt.Fprintf(&b, "%*d | %s\n", width, start+i, l)
	}
	b.WriteString("```")
	return b.String()
}

// Neighbours lists the distinct nodes linked to n in one direction, in the
// order the reference's networkx graph yields them (by first connection),
// each with the types of all its parallel edges in insertion order.
func (g *Graph) Neighbours(n NodeID, upstream bool) []Neighbour {
	idx := g.OutEdges(n)
	if upstream {
		idx = g.InEdges(n)
	}
	var out []Neighbour
	pos := map[NodeID]int{}
	for _, ei := range idx {
		e := g.Edges[ei]
		other := e.Dst
		if upstream {
			other = e.Src
		}
		i, ok := pos[other]
		if !ok {
			i = len(out)
			pos[other] = i
			out = append(out, Neighbour{Node: other})
		}
		out[i].Types = append(out[i].Types, e.Type)
	}
	return out
}

// Neighbour is a linked node and the types of the edges linking it.
type Neighbour struct {
	Node  NodeID
	Types []EdgeType
}

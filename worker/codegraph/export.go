package codegraph

import (
	"bufio"
	"encoding/json"
	"io"
)

// WriteJSONLines prints the graph as JSON lines: one
// {"node","type","start_line","end_line"} object per node, then one
// {"src","dst","type"} object per edge (duplicates kept), in insertion
// order.
func (g *Graph) WriteJSONLines(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	type nodeLine struct {
		Node      string `json:"node"`
		Type      string `json:"type"`
		StartLine int    `json:"start_line,omitempty"`
		EndLine   int    `json:"end_line,omitempty"`
	}
	type edgeLine struct {
		Src  string `json:"src"`
		Dst  string `json:"dst"`
		Type string `json:"type"`
	}
	for _, n := range g.Nodes {
		if err := enc.Encode(nodeLine{n.ID, n.Type.String(), n.StartLine, n.EndLine}); err != nil {
			return err
		}
	}
	for _, e := range g.Edges {
		if err := enc.Encode(edgeLine{g.Nodes[e.Src].ID, g.Nodes[e.Dst].ID, e.Type.String()}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

package codegraph

import (
	"strings"
)

// NameTable maps short names to non-test nodes: source files under their
// base name ("models.py") and stem ("models"), classes and functions under the last
// segment of their qualified name. Lower holds the same keys lowercased.
type NameTable struct {
	Exact map[string][]NodeID
	Lower map[string][]NodeID
}

// Names returns the graph's name table, built on first use.
func (g *Graph) Names() *NameTable {
	g.namesOnce.Do(func() {
		t := &NameTable{Exact: map[string][]NodeID{}, Lower: map[string][]NodeID{}}
		add := func(key string, n NodeID) {
			t.Exact[key] = append(t.Exact[key], n)
			t.Lower[strings.ToLower(key)] = append(t.Lower[strings.ToLower(key)], n)
		}
		for i, n := range g.Nodes {
			if IsTestID(n.ID) {
				continue
			}
			base := n.ID[strings.LastIndexByte(n.ID, '/')+1:]
			stem, source := g.langs.TrimExtension(base)
			switch {
			case source && !strings.Contains(n.ID, ":"):
				add(base, NodeID(i))
				add(stem, NodeID(i))
			case strings.Contains(n.ID, ":"):
				add(ShortName(n.ID), NodeID(i))
			}
		}
		g.names = t
	})
	return g.names
}

package repoindex

// Bytes estimates the heap an open index holds: the graph (nodes, edges,
// ids, the lookup map), contents and parse results when they are in
// memory (a freshly built index), chunk records and texts, the history,
// summaries, the chunks' postings and the node search. Workers budget their open
// indexes by it (worker.Config.IndexMemory); it is an estimate by
// construction sizes, not a measurement.
func (idx *Index) Bytes() int64 {
	const (
		node, edge, mapEntry, file, str = 56, 24, 48, 64, 16
		parsedPerByte                   = 3 // lang.File and its definitions, per byte of source
	)
	var n int64
	if g := idx.Graph; g != nil {
		for i := range g.Nodes {
			n += node + mapEntry + int64(len(g.Nodes[i].ID))
		}
		for i := range g.Edges {
			n += edge + int64(len(g.Edges[i].Alias))
		}
		for _, f := range g.Files() {
			n += file + int64(len(f.Path)+len(f.Blob)+len(f.Content)*(1+parsedPerByte))
		}
	}
	if ci := idx.Chunks; ci != nil {
		for i, c := range ci.Chunks {
			n += 64 + int64(len(c.File))
			for _, s := range c.SpanIDs {
				n += str + int64(len(s))
			}
			if ci.InMemory() {
				n += str + int64(len(ci.Text(i)))
			}
		}
	}
	if ci := idx.Chunks; ci != nil {
		if sized, ok := ci.Corpus().(interface{ Bytes() int64 }); ok {
			n += sized.Bytes()
		}
	}
	if idx.Commits != nil {
		for _, c := range idx.Commits.Commits {
			n += 160 + int64(len(c.SHA)+len(c.Subject)+len(c.Message)+len(c.Date))
			for _, f := range c.Files {
				n += str + int64(len(f))
			}
		}
	}
	if idx.Summaries != nil {
		for p, t := range idx.Summaries.Text {
			n += mapEntry + 2*str + int64(len(p)+len(t))
		}
	}
	if idx.Nodes != nil {
		n += idx.Nodes.Bytes()
	}
	return n
}

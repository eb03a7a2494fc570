package codegraph

import (
	"bufio"
	"fmt"
	"io"

	"github.com/a2farm/a2farm/lang"
)

// A graph delta stores a snapshot's graph as edits of a base graph of the
// same repository: the snapshot's files, nodes and edges are each the
// base's sequence with runs copied, runs skipped and records inserted.
// Nodes are matched by identity (id, type, file); a copied node's lines and
// bytes follow as runs of shifts, since an edit moves everything below it
// in its file by the same amount. Edges are matched after the base's
// endpoints are renumbered by node id, so an edge between definitions that
// survived — the bulk of a graph — is copied even when its endpoints
// moved. Applied to the base it gives the snapshot's graph record for
// record, in the same order, so every answer read from it is the fresh
// build's.

const deltaMagic = "a2farm-graph-delta 1\n"

// Script operations.
const (
	opCopy   = 1 // the next n base records
	opSkip   = 2 // drop the next n base records
	opInsert = 3 // n records follow
)

// script turns base into next in one pass: each record of next is copied
// from its next occurrence in the base at or after the current place (the
// base records before it skipped), or inserted when the base has none
// left. A record that moved up is inserted again: the script stays linear
// in time, and correct whatever it costs.
func script[K comparable](base, next []K) []scriptOp {
	// The common ends are copied as they are; only the middle is matched
	// (an edit to one file leaves most of a graph's sequences alike).
	head := 0
	for head < len(base) && head < len(next) && base[head] == next[head] {
		head++
	}
	tail := 0
	for tail < len(base)-head && tail < len(next)-head && base[len(base)-1-tail] == next[len(next)-1-tail] {
		tail++
	}
	var s scriptBuilder
	s.add(opCopy, head, 0)
	at := map[K][]int{} // the middle's base positions by key, ascending
	for i := head; i < len(base)-tail; i++ {
		at[base[i]] = append(at[base[i]], i)
	}
	i := head // the next base record
	for j := head; j < len(next)-tail; j++ {
		ps := at[next[j]]
		for len(ps) > 0 && ps[0] < i {
			ps = ps[1:]
		}
		if len(ps) == 0 {
			at[next[j]] = ps
			s.add(opInsert, 1, j)
			continue
		}
		s.add(opSkip, ps[0]-i, 0)
		s.add(opCopy, 1, 0)
		i = ps[0] + 1
		at[next[j]] = ps[1:]
	}
	s.add(opSkip, len(base)-tail-i, 0)
	s.add(opCopy, tail, 0)
	return s.ops
}

// scriptBuilder appends operations, joining each to a run of its kind.
type scriptBuilder struct{ ops []scriptOp }

// add appends n records of kind (an insert's first at from in next); runs
// of one kind join, an insert run staying contiguous since next is walked
// in order.
func (s *scriptBuilder) add(kind byte, n, from int) {
	if n == 0 {
		return
	}
	if l := len(s.ops); l > 0 && s.ops[l-1].kind == kind {
		s.ops[l-1].n += n
		return
	}
	s.ops = append(s.ops, scriptOp{kind: kind, n: n, from: from})
}

type scriptOp struct {
	kind byte
	n    int
	from int // opInsert: the first inserted record's index in next
}

// nodeKey is a node's identity as a delta matches it: its file named by
// path, not by an index that other files' additions shift.
type nodeKey struct {
	id   string
	typ  NodeType
	file string
}

func (g *Graph) nodeKeys() []nodeKey {
	keys := make([]nodeKey, len(g.Nodes))
	for i, n := range g.Nodes {
		file := ""
		if n.FileIndex >= 0 {
			file = g.files[n.FileIndex].Path
		}
		keys[i] = nodeKey{n.ID, n.Type, file}
	}
	return keys
}

// span is where a node is in its file; a shift is the difference of two.
type span [4]int64

func spanOf(n *Node) span {
	return span{int64(n.StartLine), int64(n.EndLine), int64(n.StartByte), int64(n.EndByte)}
}

func (s span) minus(o span) span { return span{s[0] - o[0], s[1] - o[1], s[2] - o[2], s[3] - o[3]} }

func (s span) plus(o span) span { return span{s[0] + o[0], s[1] + o[1], s[2] + o[2], s[3] + o[3]} }

func fileKeys(files []SourceFile) [][2]string {
	keys := make([][2]string, len(files))
	for i, f := range files {
		keys[i] = [2]string{f.Path, f.Blob}
	}
	return keys
}

type edgeKey struct {
	src, dst int64 // -1: an endpoint the snapshot lacks
	typ      EdgeType
	alias    string
}

// baseEdgeKeys are base's edges with their endpoints renumbered as g
// numbers the same ids.
func baseEdgeKeys(base, g *Graph) []edgeKey {
	renumber := make([]int64, len(base.Nodes))
	for i, n := range base.Nodes {
		renumber[i] = -1
		if to, ok := g.Lookup(n.ID); ok {
			renumber[i] = int64(to)
		}
	}
	keys := make([]edgeKey, len(base.Edges))
	for i, e := range base.Edges {
		keys[i] = edgeKey{renumber[e.Src], renumber[e.Dst], e.Type, e.Alias}
	}
	return keys
}

func edgeKeys(g *Graph) []edgeKey {
	keys := make([]edgeKey, len(g.Edges))
	for i, e := range g.Edges {
		keys[i] = edgeKey{int64(e.Src), int64(e.Dst), e.Type, e.Alias}
	}
	return keys
}

// WriteDelta writes g as a delta on base, which ReadGraphDelta applies to
// the same base.
func (g *Graph) WriteDelta(base *Graph, w io.Writer) error {
	e := encoder{w: bufio.NewWriter(w)}
	ops := func(ops []scriptOp, insert func(i int)) {
		e.uvarint(uint64(len(ops)))
		for _, op := range ops {
			e.w.WriteByte(op.kind)
			e.uvarint(uint64(op.n))
			if op.kind == opInsert {
				for i := op.from; i < op.from+op.n; i++ {
					insert(i)
				}
			}
		}
	}
	e.w.WriteString(deltaMagic)
	// The base's shape: a delta read on another base is refused (the store
	// names the base; this catches a store that lost track of it).
	e.uvarint(uint64(len(base.files)))
	e.uvarint(uint64(len(base.Nodes)))
	e.uvarint(uint64(len(base.Edges)))
	ops(script(fileKeys(base.files), fileKeys(g.files)), func(i int) { e.str(g.files[i].Path); e.str(g.files[i].Blob) })
	nodeOps := script(base.nodeKeys(), g.nodeKeys())
	ops(nodeOps, func(i int) { e.node(&g.Nodes[i]) })
	// The copied nodes' shifts, in runs of equal ones.
	type run struct {
		n     int
		shift span
	}
	var runs []run
	bi, ni := 0, 0
	for _, op := range nodeOps {
		switch op.kind {
		case opSkip:
			bi += op.n
		case opInsert:
			ni += op.n
		case opCopy:
			for range op.n {
				shift := spanOf(&g.Nodes[ni]).minus(spanOf(&base.Nodes[bi]))
				if l := len(runs); l > 0 && runs[l-1].shift == shift {
					runs[l-1].n++
				} else {
					runs = append(runs, run{1, shift})
				}
				bi++
				ni++
			}
		}
	}
	e.uvarint(uint64(len(runs)))
	for _, r := range runs {
		e.uvarint(uint64(r.n))
		for _, v := range r.shift {
			e.varint(v)
		}
	}
	ops(script(baseEdgeKeys(base, g), edgeKeys(g)), func(i int) { e.edge(&g.Edges[i]) })
	return e.w.Flush()
}

// ReadGraphDelta applies a delta WriteDelta wrote on base. Contents and
// parse results come from src when a tool needs them.
func ReadGraphDelta(base *Graph, data []byte, langs *lang.Set, src Sources) (*Graph, error) {
	if len(data) < len(deltaMagic) || string(data[:len(deltaMagic)]) != deltaMagic {
		return nil, errBadGraph
	}
	d := decoder{b: data[len(deltaMagic):]}
	if f, n, e := d.uvarint(), d.uvarint(), d.uvarint(); d.err == nil &&
		(f != uint64(len(base.files)) || n != uint64(len(base.Nodes)) || e != uint64(len(base.Edges))) {
		return nil, fmt.Errorf("%w: a delta on a base of %d files, %d nodes and %d edges applied to one of %d, %d and %d",
			errBadGraph, f, n, e, len(base.files), len(base.Nodes), len(base.Edges))
	}
	// apply walks a script over a base of n records: copy(i) takes base
	// record i, insert reads one record from the delta.
	apply := func(what string, n int, copyOne func(i int), insert func()) {
		i := 0
		ops := d.count()
		for range ops {
			kind, count := d.byte(), d.uvarint()
			if d.err != nil {
				return
			}
			if kind == opInsert && count > uint64(len(d.b)) { // each inserted record takes a byte at least
				d.err = fmt.Errorf("%s: %d records inserted by %d bytes", what, count, len(d.b))
				return
			}
			switch kind {
			case opCopy, opSkip:
				if count > uint64(n-i) {
					d.err = fmt.Errorf("%s: %d records past the base's %d", what, count, n-i)
					return
				}
				if kind == opCopy {
					for k := i; k < i+int(count); k++ {
						copyOne(k)
					}
				}
				i += int(count)
			case opInsert:
				for range count {
					insert()
				}
			default:
				d.err = fmt.Errorf("%s: unknown operation %d", what, kind)
			}
		}
		if d.err == nil && i != n {
			d.err = fmt.Errorf("%s: the script leaves %d of the base's %d records unread", what, n-i, n)
		}
	}

	var files []SourceFile
	apply("files", len(base.files), func(i int) { files = append(files, SourceFile{Path: base.files[i].Path, Blob: base.files[i].Blob}) },
		func() { files = append(files, SourceFile{Path: d.str(), Blob: d.str()}) })
	fileIndex := make(map[string]int32, len(files))
	for i, f := range files {
		fileIndex[f.Path] = int32(i)
	}
	g := newGraph(langs, files)
	g.sources = src
	var copied []int // indices in g of the nodes copied from the base
	apply("nodes", len(base.Nodes), func(i int) {
		n := base.Nodes[i]
		copied = append(copied, len(g.Nodes))
		if n.FileIndex >= 0 {
			fi, ok := fileIndex[base.files[n.FileIndex].Path]
			if !ok && d.err == nil {
				d.err = fmt.Errorf("node %q copied without its file %s", n.ID, base.files[n.FileIndex].Path)
			}
			n.FileIndex = fi
		}
		g.AddNode(n)
	}, func() {
		g.AddNode(d.node(len(files)))
	})
	runs := d.count()
	next := 0
	for range runs {
		n := d.uvarint()
		var shift span
		for k := range shift {
			shift[k] = d.varint()
		}
		if d.err != nil {
			break
		}
		if n > uint64(len(copied)-next) {
			d.err = fmt.Errorf("node shifts for %d nodes past the %d copied", n, len(copied))
			break
		}
		for _, i := range copied[next : next+int(n)] {
			node := &g.Nodes[i]
			s := spanOf(node).plus(shift)
			node.StartLine, node.EndLine, node.StartByte, node.EndByte = int(s[0]), int(s[1]), uint32(s[2]), uint32(s[3])
		}
		next += int(n)
	}
	if d.err == nil && next != len(copied) {
		d.err = fmt.Errorf("node shifts for %d of the %d copied nodes", next, len(copied))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", errBadGraph, d.err)
	}
	keys := baseEdgeKeys(base, g)
	addEdge := func(src, dst int64, t EdgeType, alias string) {
		if d.err == nil && (src < 0 || dst < 0 || int(src) >= len(g.Nodes) || int(dst) >= len(g.Nodes)) {
			d.err = fmt.Errorf("edge %d -> %d of %d nodes", src, dst, len(g.Nodes))
		}
		if d.err == nil {
			g.AddEdge(lang.NodeID(src), lang.NodeID(dst), t, alias)
		}
	}
	apply("edges", len(base.Edges), func(i int) { k := keys[i]; addEdge(k.src, k.dst, k.typ, k.alias) }, func() {
		src, dst := int64(d.uvarint()), int64(d.uvarint())
		t := EdgeType(d.byte())
		addEdge(src, dst, t, d.str())
	})
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", errBadGraph, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the edges", errBadGraph, len(d.b))
	}
	return g, nil
}

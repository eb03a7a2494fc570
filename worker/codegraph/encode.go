package codegraph

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/a2farm/a2farm/lang"
)

// Sources gives a graph read back with ReadGraph its files' contents and
// parse results, on demand: a graph opened from disk holds neither, so a
// tool call reads only the files it shows.
type Sources interface {
	// Content returns the content of the snapshot's file fi.
	Content(fi int) ([]byte, error)
	// Parsed returns the structure of file fi as its language parses it.
	Parsed(fi int) (*lang.File, error)
}

// content returns the content of file fi; nil when it cannot be read.
func (g *Graph) content(fi int32) []byte {
	if c := g.files[fi].Content; c != nil || g.sources == nil {
		return c
	}
	c, err := g.sources.Content(int(fi))
	if err != nil {
		return nil
	}
	return c
}

// Content returns the content of file fi of Files, reading it on demand
// for a graph opened from disk.
func (g *Graph) Content(fi int) ([]byte, error) {
	if c := g.files[fi].Content; c != nil || g.sources == nil {
		return c, nil
	}
	return g.sources.Content(fi)
}

// parsedFile returns the structure of file fi; nil when it did not parse.
func (g *Graph) parsedFile(fi int32) *lang.File {
	if g.parsed != nil {
		return g.parsed[fi]
	}
	if g.sources == nil {
		return nil
	}
	pf, err := g.sources.Parsed(int(fi))
	if err != nil {
		return nil
	}
	return pf
}

// graphMagic opens an encoded graph; the digit is its format version.
const graphMagic = "a2farm-graph 1\n"

// WriteBinary encodes the graph — files (path, blob), nodes and edges in
// insertion order — in a compact binary form that ReadGraph reads back in
// one pass; contents and parse results are not part of it.
func (g *Graph) WriteBinary(w io.Writer) error {
	e := encoder{w: bufio.NewWriter(w)}
	e.w.WriteString(graphMagic)
	e.uvarint(uint64(len(g.files)))
	for _, f := range g.files {
		e.str(f.Path)
		e.str(f.Blob)
	}
	e.uvarint(uint64(len(g.Nodes)))
	for i := range g.Nodes {
		e.node(&g.Nodes[i])
	}
	e.uvarint(uint64(len(g.Edges)))
	for i := range g.Edges {
		e.edge(&g.Edges[i])
	}
	return e.w.Flush()
}

// encoder writes varints, strings and records.
type encoder struct {
	w       *bufio.Writer
	scratch [binary.MaxVarintLen64]byte
}

func (e *encoder) uvarint(v uint64) { e.w.Write(e.scratch[:binary.PutUvarint(e.scratch[:], v)]) }

func (e *encoder) varint(v int64) { e.w.Write(e.scratch[:binary.PutVarint(e.scratch[:], v)]) }

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.w.WriteString(s)
}

// node writes a node record (decoder.node reads it).
func (e *encoder) node(n *Node) {
	e.str(n.ID)
	e.w.WriteByte(byte(n.Type))
	e.uvarint(uint64(n.FileIndex + 1))
	e.uvarint(uint64(n.StartLine))
	e.uvarint(uint64(n.EndLine))
	e.uvarint(uint64(n.StartByte))
	e.uvarint(uint64(n.EndByte))
}

func (e *encoder) edge(x *Edge) {
	e.uvarint(uint64(x.Src))
	e.uvarint(uint64(x.Dst))
	e.w.WriteByte(byte(x.Type))
	e.str(x.Alias)
}

// errBadGraph marks an encoded graph that does not decode.
var errBadGraph = errors.New("not an encoded code graph")

// ReadGraph decodes what WriteBinary wrote. Contents and parse results come
// from src when a tool needs them.
func ReadGraph(data []byte, langs *lang.Set, src Sources) (*Graph, error) {
	d, files, err := readFiles(data)
	if err != nil {
		return nil, err
	}
	g := newGraph(langs, files)
	g.sources = src
	nodes := d.count()
	g.Nodes = make([]Node, 0, nodes)
	for range nodes {
		g.AddNode(d.node(len(files)))
	}
	edges := d.count()
	g.Edges = make([]Edge, 0, edges)
	for range edges {
		src, dst := lang.NodeID(d.uvarint()), lang.NodeID(d.uvarint())
		t := EdgeType(d.byte())
		alias := d.str()
		if d.err == nil && (int(src) >= len(g.Nodes) || int(dst) >= len(g.Nodes)) {
			d.err = fmt.Errorf("edge %d -> %d of %d nodes", src, dst, len(g.Nodes))
		}
		if d.err != nil {
			break
		}
		g.AddEdge(src, dst, t, alias)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", errBadGraph, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the edges", errBadGraph, len(d.b))
	}
	return g, nil
}

// node reads a node record (WriteBinary's) of a graph of files files.
func (d *decoder) node(files int) Node {
	n := Node{ID: d.str(), Type: NodeType(d.byte())}
	n.FileIndex = int32(d.uvarint()) - 1
	n.StartLine, n.EndLine = int(d.uvarint()), int(d.uvarint())
	n.StartByte, n.EndByte = uint32(d.uvarint()), uint32(d.uvarint())
	if d.err == nil && (n.FileIndex >= int32(files) || n.FileIndex < -1) {
		d.err = fmt.Errorf("node %q: file %d of %d", n.ID, n.FileIndex, files)
	}
	return n
}

// ReadGraphFiles decodes only the files (path and blob) of an encoded
// graph: what a graph shares with another is known without its nodes and
// edges.
func ReadGraphFiles(data []byte) ([]SourceFile, error) {
	_, files, err := readFiles(data)
	return files, err
}

// readFiles decodes an encoded graph's header and files, and returns the
// decoder at its nodes.
func readFiles(data []byte) (*decoder, []SourceFile, error) {
	if len(data) < len(graphMagic) || string(data[:len(graphMagic)]) != graphMagic {
		return nil, nil, errBadGraph
	}
	d := &decoder{b: data[len(graphMagic):]}
	files := make([]SourceFile, d.count())
	for i := range files {
		files[i] = SourceFile{Path: d.str(), Blob: d.str()}
	}
	if d.err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errBadGraph, d.err)
	}
	return d, files, nil
}

// decoder reads varints, bytes and strings, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length and bounds it by what is left, so a damaged file
// cannot make a huge allocation.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	return int(n)
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) str() string {
	n := d.count()
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

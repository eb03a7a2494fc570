package codegraph

import (
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// Skeleton returns the outline the reference shows for a class or file too
// long to print: for a file, its module-level classes, functions and
// simple assignments; for a class, its body without the docstring; every
// function body replaced by its language's elision ("..." in Python).
func (g *Graph) Skeleton(n NodeID) string {
	node := &g.Nodes[n]
	if node.FileIndex < 0 {
		return ""
	}
	pf := g.parsedFile(node.FileIndex)
	code := g.Code(n)
	if pf == nil || pf.HasErrors || pf.LegacySyntax {
		return code
	}
	o := &outline{lines: strings.Split(string(g.content(node.FileIndex)), "\n")}
	if l := g.langs.Reader(g.files[node.FileIndex].Path); l != nil {
		o.elision = l.BodyElision()
	}
	lines := o.lines
	switch node.Type {
	case File:
		type item struct {
			start int
			emit  func()
		}
		var items []item
		for _, d := range pf.Defs {
			if indentOf(lines[d.Span.Start-1]) != "" {
				continue // nested in a module-level if/try: not a module statement
			}
			items = append(items, item{d.FirstLine(), func() { o.def(d) }})
		}
		for _, a := range pf.Assignments {
			if a.Annotated {
				continue
			}
			items = append(items, item{a.Span.Start, func() { o.write(a.Span.Start, a.Span.End) }})
		}
		// Emit in source order.
		for len(items) > 0 {
			best := 0
			for i := range items {
				if items[i].start < items[best].start {
					best = i
				}
			}
			items[best].emit()
			items = append(items[:best], items[best+1:]...)
		}
	case Class:
		d := g.defAt(pf, node)
		if d == nil {
			return code
		}
		o.class(d, node.StartLine)
	default:
		return code
	}
	return strings.TrimRight(o.b.String(), "\n")
}

// defAt finds the parsed definition of a class or function node.
func (g *Graph) defAt(pf *lang.File, node *Node) *lang.Def {
	_, qual, _ := strings.Cut(node.ID, ":")
	var found *lang.Def
	pf.Walk(func(d *lang.Def) bool {
		if d.QualName == qual && d.Span.Start == node.StartLine {
			found = d
		}
		return found == nil
	})
	return found
}

// outline writes a skeleton from a file's lines.
type outline struct {
	b       strings.Builder
	lines   []string
	elision string // what stands for a function body
}

func (o *outline) def(d *lang.Def) {
	if d.Kind == lang.KindClass {
		o.class(d, d.FirstLine())
		return
	}
	o.function(d)
}

// function writes decorators and signature, then the elision.
func (o *outline) function(d *lang.Def) {
	headerEnd := d.BodyStart - 1
	if headerEnd < d.Span.Start {
		o.write(d.FirstLine(), d.Span.End) // one-line def: keep as is
		return
	}
	o.write(d.FirstLine(), headerEnd)
	o.b.WriteString(indentOf(o.lines[d.Span.Start-1]) + "    " + o.elision + "\n")
}

// class writes the class header and its body with the docstring dropped
// and member functions reduced to signatures.
func (o *outline) class(d *lang.Def, from int) {
	headerEnd := d.BodyStart - 1
	if headerEnd < d.Span.Start {
		o.write(from, d.Span.End)
		return
	}
	o.write(from, headerEnd)
	next := d.BodyStart
	skipTo := func(line int) { next = max(next, line+1) }
	if doc := d.Docstring; doc != nil {
		o.write(next, doc.Span.Start-1)
		skipTo(doc.Span.End)
	}
	for _, c := range d.Children {
		start := c.FirstLine()
		if start < next {
			continue
		}
		o.write(next, start-1)
		o.def(c)
		skipTo(c.Span.End)
	}
	o.write(next, d.Span.End)
}

// write copies lines from..to (1-based, inclusive).
func (o *outline) write(from, to int) {
	for l := max(from, 1); l <= to && l <= len(o.lines); l++ {
		o.b.WriteString(o.lines[l-1])
		o.b.WriteByte('\n')
	}
}

func indentOf(line string) string {
	return line[:len(line)-len(strings.TrimLeft(line, " \t"))]
}

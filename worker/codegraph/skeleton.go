package codegraph

import (
	"strings"

	"github.com/a2farm/a2farm/internal/lang"
)

// Skeleton returns the outline the reference shows for a class or file too
// long to print: for a file, its module-level classes, functions and
// simple assignments; for a class, its body without the docstring; every
// function body replaced by "...".
func (g *Graph) Skeleton(n NodeID) string {
	node := &g.Nodes[n]
	if node.file < 0 {
		return ""
	}
	pf := g.parsed[node.file]
	code := g.Code(n)
	if pf == nil || pf.HasErrors || pf.LegacySyntax {
		return code
	}
	lines := strings.Split(string(g.files[node.file].Content), "\n")
	var b strings.Builder
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
			items = append(items, item{d.FirstLine(), func() { skeletonDef(&b, lines, d) }})
		}
		for _, a := range pf.Assignments {
			if a.Annotated {
				continue
			}
			items = append(items, item{a.Span.Start, func() { writeLines(&b, lines, a.Span.Start, a.Span.End) }})
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
		skeletonClass(&b, lines, d, node.StartLine)
	default:
		return code
	}
	return strings.TrimRight(b.String(), "\n")
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

func skeletonDef(b *strings.Builder, lines []string, d *lang.Def) {
	if d.Kind == lang.KindClass {
		skeletonClass(b, lines, d, d.FirstLine())
		return
	}
	skeletonFunction(b, lines, d)
}

// skeletonFunction writes decorators and signature, then "...".
func skeletonFunction(b *strings.Builder, lines []string, d *lang.Def) {
	headerEnd := d.BodyStart - 1
	if headerEnd < d.Span.Start {
		writeLines(b, lines, d.FirstLine(), d.Span.End) // one-line def: keep as is
		return
	}
	writeLines(b, lines, d.FirstLine(), headerEnd)
	b.WriteString(indentOf(lines[d.Span.Start-1]) + "    ...\n")
}

// skeletonClass writes the class header and its body with the docstring
// dropped and member functions reduced to signatures.
func skeletonClass(b *strings.Builder, lines []string, d *lang.Def, from int) {
	headerEnd := d.BodyStart - 1
	if headerEnd < d.Span.Start {
		writeLines(b, lines, from, d.Span.End)
		return
	}
	writeLines(b, lines, from, headerEnd)
	next := d.BodyStart
	skipTo := func(line int) { next = max(next, line+1) }
	if doc := d.Docstring; doc != nil {
		writeLines(b, lines, next, doc.Span.Start-1)
		skipTo(doc.Span.End)
	}
	for _, c := range d.Children {
		start := c.FirstLine()
		if start < next {
			continue
		}
		writeLines(b, lines, next, start-1)
		skeletonDef(b, lines, c)
		skipTo(c.Span.End)
	}
	writeLines(b, lines, next, d.Span.End)
}

func writeLines(b *strings.Builder, lines []string, from, to int) {
	for l := max(from, 1); l <= to && l <= len(lines); l++ {
		b.WriteString(lines[l-1])
		b.WriteByte('\n')
	}
}

func indentOf(line string) string {
	return line[:len(line)-len(strings.TrimLeft(line, " \t"))]
}

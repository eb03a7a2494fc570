package python

import (
	"slices"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// Gold is the reference generator's rule: a changed line inside a direct
// method of a class names "C.m" (module C); elsewhere in a class body the
// class (entity and module, the correction of the reference's rule);
// inside any other function its outermost function met first; imports,
// comments, class docstrings and module-level assignments are file-level
// only.
func (Language) Gold(f *lang.File) lang.GoldRule { return newStructure(f) }

// structure is the reference generator's view of a file.
type structure struct {
	// classes in ast.walk order, each with its direct methods.
	classes []class
	// functions: every other def in ast.walk order whose name is not the
	// name of a method met before it.
	functions []named
	// lines to skip: import statements anywhere, class docstrings (as
	// many lines as the cleaned docstring has, from its first line) and
	// module-level assignments.
	skip []lang.Span
}

type named struct {
	name string
	span lang.Span
}

type class struct {
	named
	methods []named
}

func newStructure(f *lang.File) *structure {
	s := &structure{}
	methodNames := map[string]bool{}
	for _, d := range f.BreadthFirst() {
		switch d.Kind {
		case lang.KindClass:
			c := class{named: named{d.Name, d.Span}}
			for _, m := range d.Children {
				if m.Kind == lang.KindFunction && m.Method {
					c.methods = append(c.methods, named{m.Name, m.Span})
					methodNames[m.Name] = true
				}
			}
			s.classes = append(s.classes, c)
			if doc := d.Docstring; doc != nil {
				if n := docstringLines(doc.Text); n > 0 {
					s.skip = append(s.skip, lang.Span{Start: doc.Span.Start, End: doc.Span.Start + n - 1})
				}
			}
		case lang.KindFunction:
			if !methodNames[d.Name] {
				s.functions = append(s.functions, named{d.Name, d.Span})
			}
		}
	}
	for _, imp := range f.Imports {
		s.skip = append(s.skip, imp.Span)
	}
	for _, a := range f.Assignments {
		s.skip = append(s.skip, a.Span)
	}
	return s
}

// EntityAt maps a changed line to its entity the way the reference does;
// ok is false for lines that give file-level gold only (module-level code,
// imports, comments, class docstrings).
func (s *structure) EntityAt(line int, text string) (lang.Entity, bool) {
	if strings.HasPrefix(strings.TrimSpace(text), "#") {
		return lang.Entity{}, false
	}
	for _, sp := range s.skip {
		if sp.Contains(line) {
			return lang.Entity{}, false
		}
	}
	for _, c := range s.classes {
		for _, m := range c.methods {
			if m.span.Contains(line) {
				return lang.Entity{Name: c.name + "." + m.name}, true
			}
		}
		if c.span.Contains(line) {
			// Class body outside a direct method (an attribute, a method's
			// decorator line, a nested statement or class): the class, as
			// in the published gold files; the scan stops here, so methods
			// of nested classes roll up to the outer class.
			return lang.Entity{Name: c.name, Class: true}, true
		}
	}
	for _, f := range s.functions {
		if f.span.Contains(line) {
			return lang.Entity{Name: f.name}, true
		}
	}
	return lang.Entity{}, false
}

// Has reports whether an entity found in the new file existed in this
// (old) structure: a class C needs a class named C, "C.m" a method m in
// the first class named C, "f" a function named f.
func (s *structure) Has(e lang.Entity) bool {
	if e.Class {
		return slices.ContainsFunc(s.classes, func(c class) bool { return c.name == e.Name })
	}
	if cls, method, ok := strings.Cut(e.Name, "."); ok {
		if i := strings.LastIndexByte(method, '.'); i >= 0 {
			method = method[i+1:]
		}
		for _, c := range s.classes {
			if c.name != cls {
				continue
			}
			return slices.ContainsFunc(c.methods, func(m named) bool { return m.name == method })
		}
		return false
	}
	return slices.ContainsFunc(s.functions, func(f named) bool { return f.name == e.Name })
}

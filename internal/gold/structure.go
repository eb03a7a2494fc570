package gold

import (
	"strings"

	"github.com/a2farm/a2farm/internal/pyparse"
)

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
	skip []pyparse.Span
}

type named struct {
	name string
	span pyparse.Span
}

type class struct {
	named
	methods []named
}

func newStructure(f *pyparse.File) *structure {
	s := &structure{}
	methodNames := map[string]bool{}
	for _, d := range f.BreadthFirst() {
		switch d.Kind {
		case pyparse.KindClass:
			c := class{named: named{d.Name, d.Span}}
			for _, m := range d.Children {
				if m.Kind == pyparse.KindFunction && m.Method {
					c.methods = append(c.methods, named{m.Name, m.Span})
					methodNames[m.Name] = true
				}
			}
			s.classes = append(s.classes, c)
			if doc := d.Docstring; doc != nil {
				if cleaned := pyparse.CleanDocstring(doc.Text); cleaned != "" {
					n := len(pyparse.SplitLines(cleaned))
					s.skip = append(s.skip, pyparse.Span{Start: doc.Span.Start, End: doc.Span.Start + n - 1})
				}
			}
		case pyparse.KindFunction:
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

// entityAt maps a changed line to "Class.method" or "function", the way
// the reference does; ok is false for lines that give file-level gold only.
func (s *structure) entityAt(line int, text string) (string, bool) {
	if strings.HasPrefix(strings.TrimSpace(text), "#") {
		return "", false
	}
	for _, sp := range s.skip {
		if sp.Contains(line) {
			return "", false
		}
	}
	for _, c := range s.classes {
		for _, m := range c.methods {
			if m.span.Contains(line) {
				return c.name + "." + m.name, true
			}
		}
		if c.span.Contains(line) {
			// Class body outside a direct method: no entity, and the scan
			// stops here (this also hides nested classes' methods).
			return "", false
		}
	}
	for _, f := range s.functions {
		if f.span.Contains(line) {
			return f.name, true
		}
	}
	return "", false
}

// has reports whether a name found in the new file existed in this (old)
// structure: "C.m" needs a method m in the first class named C, "f" a
// function named f.
func (s *structure) has(name string) bool {
	if cls, method, ok := strings.Cut(name, "."); ok {
		if i := strings.LastIndexByte(method, '.'); i >= 0 {
			method = method[i+1:]
		}
		for _, c := range s.classes {
			if c.name != cls {
				continue
			}
			for _, m := range c.methods {
				if m.name == method {
					return true
				}
			}
			return false
		}
		return false
	}
	for _, f := range s.functions {
		if f.name == name {
			return true
		}
	}
	return false
}

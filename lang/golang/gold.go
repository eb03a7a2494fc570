package golang

import (
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// SkipsGold keeps tests (_test.go files, testdata/) out of gold.
func (l Language) SkipsGold(p string) bool { return l.IsTest(p) }

// Gold is the Python rule carried over to Go: a changed line inside a
// method names "Type.Method" (module Type); inside a type spec the type
// (entity and module); inside a top-level function, closures included, the
// function; imports, var and const declarations, comments and every other
// top-level line give the file only.
func (Language) Gold(f *lang.File) lang.GoldRule {
	g := &goldRule{names: map[string]bool{}}
	for _, d := range f.Defs {
		e := lang.Entity{Name: d.QualName, Class: d.Kind == lang.KindClass}
		g.spans = append(g.spans, entitySpan{e, d.Span})
		g.names[e.Name] = true
	}
	return g
}

type entitySpan struct {
	entity lang.Entity
	span   lang.Span
}

// goldRule maps lines to the top-level definitions around them (Go
// declares types, functions and methods at the top level only).
type goldRule struct {
	spans []entitySpan
	names map[string]bool
}

// EntityAt names the definition a changed line lies in; comment lines
// and lines outside every definition give file-level gold only.
func (g *goldRule) EntityAt(line int, text string) (lang.Entity, bool) {
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "//") {
		return lang.Entity{}, false
	}
	for _, s := range g.spans {
		if s.span.Contains(line) {
			return s.entity, true
		}
	}
	return lang.Entity{}, false
}

// Has reports whether the version of the file defines the entity.
func (g *goldRule) Has(e lang.Entity) bool { return g.names[e.Name] }

package typescript

import (
	"github.com/a2farm/a2farm/lang"
)

// Gold is the Python rule carried over: a changed line inside a method
// names "Class.m" (module Class); elsewhere in a class the class; inside
// a top-level function (nested code included) the function; imports,
// interfaces, types, enums, comments and other top-level statements give
// the file only.
func (l Language) Gold(f *lang.File) lang.GoldRule {
	g := &goldRule{names: map[string]bool{}}
	for _, d := range f.Defs {
		for _, m := range d.Children {
			g.spans = append(g.spans, entitySpan{lang.Entity{Name: m.QualName}, m.Span})
			g.names[m.QualName] = true
		}
		// After its methods: a line in a method names the method.
		g.spans = append(g.spans, entitySpan{lang.Entity{Name: d.QualName, Class: d.Kind == lang.KindClass}, d.Span})
		g.names[d.QualName] = true
	}
	return g
}

type entitySpan struct {
	entity lang.Entity
	span   lang.Span
}

type goldRule struct {
	spans []entitySpan
	names map[string]bool
}

// EntityAt names the innermost definition around a changed line; comment
// lines and lines outside every definition give the file only.
func (g *goldRule) EntityAt(line int, text string) (lang.Entity, bool) {
	if (Language{}).IsComment(trimmed(text)) {
		return lang.Entity{}, false
	}
	for _, s := range g.spans {
		if s.span.Contains(line) {
			return s.entity, true
		}
	}
	return lang.Entity{}, false
}

// Has reports whether this version of the file defines the entity.
func (g *goldRule) Has(e lang.Entity) bool { return g.names[e.Name] }

func trimmed(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return s
}

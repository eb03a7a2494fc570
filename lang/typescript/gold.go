package typescript

import "github.com/a2farm/a2farm/lang"

// Gold is the Python rule carried over: a changed line inside a method
// names "Class.m" (module Class); elsewhere in a class the class; inside
// a top-level function (nested code included) the function; imports,
// interfaces, types, enums, comments and other top-level statements give
// the file only.
func (l Language) Gold(f *lang.File) lang.GoldRule {
	g := lang.NewSpanGold(l.IsComment)
	for _, d := range f.Defs {
		for _, m := range d.Children { // before the class: a method's line names the method
			g.Add(lang.Entity{Name: m.QualName}, m.Span)
		}
		g.Add(lang.Entity{Name: d.QualName, Class: d.Kind == lang.KindClass}, d.Span)
	}
	return g
}

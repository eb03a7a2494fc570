package golang

import "github.com/a2farm/a2farm/lang"

// SkipsGold keeps tests (_test.go files, testdata/) out of gold.
func (l Language) SkipsGold(p string) bool { return l.IsTest(p) }

// Gold is the Python rule carried over to Go: a changed line inside a
// method names "Type.Method" (module Type); inside a type spec the type
// (entity and module); inside a top-level function, closures included, the
// function; imports, var and const declarations, comments and every other
// top-level line give the file only. Go declares all of them at the top
// level, so their spans do not nest.
func (l Language) Gold(f *lang.File) lang.GoldRule {
	g := lang.NewSpanGold(l.IsComment)
	for _, d := range f.Defs {
		g.Add(lang.Entity{Name: d.QualName, Class: d.Kind == lang.KindClass}, d.Span)
	}
	return g
}

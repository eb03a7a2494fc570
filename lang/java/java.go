// Package java is a2farm's Java: files read with tree-sitter-java, the
// code graph's nodes and edges for Java (classes, interfaces, enums,
// records and annotation types, nested ones included, and their methods
// and constructors), the gold rule for Java patches and what the tools
// hide (tests).
//
// Ids: "path/Foo.java" (file), "path/Foo.java:Foo" for a type and
// "path/Foo.java:Outer.Inner" for a nested one, "path/Foo.java:Foo.m" for
// a method and "path/Foo.java:Foo.Foo" for a constructor (a record's
// compact constructor too). Overloads share one id, whose node spans the
// first of them. Types declared inside a method body (local and
// anonymous classes) and lambdas are part of that method.
package java

import (
	"path"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// version changes whenever the output for the same source changes.
const version = "1"

// Language is Java.
type Language struct{}

var _ lang.Language = Language{}

// Name identifies the language.
func (Language) Name() string { return "java" }

// Version is part of every cache key.
func (Language) Version() string { return version }

// NewParser returns a tree-sitter-java parser.
func (Language) NewParser() (lang.Parser, error) { return newParser() }

// Extensions are Java's source files.
func (Language) Extensions() []string { return []string{".java"} }

// Reads takes every .java file outside build output (build/, target/) and
// generated sources.
func (Language) Reads(p string) bool {
	return strings.HasSuffix(p, ".java") &&
		!lang.InFolder(p, "build", "target", "generated-sources", "generated-test-sources", "generated")
}

// IsTest reports files under a test/ folder (Maven's and Gradle's
// src/test/ among them) and the test classes' names the build tools run:
// *Test.java, *Tests.java and *IT.java.
func (Language) IsTest(p string) bool {
	if lang.InFolder(p, "test") {
		return true
	}
	base := path.Base(p)
	for _, suffix := range []string{"Test.java", "Tests.java", "IT.java"} {
		if strings.HasSuffix(base, suffix) {
			return true
		}
	}
	return false
}

// SkipsGold keeps tests out of gold.
func (l Language) SkipsGold(p string) bool { return l.IsTest(p) }

// CanonicalID is the id itself: a constructor keeps its own id.
func (Language) CanonicalID(id string) string { return id }

// IsComment reports a comment-only line: a line comment, the start of a
// block or Javadoc comment, or one of its continuation lines.
func (Language) IsComment(line string) bool {
	return strings.HasPrefix(line, "//") || strings.HasPrefix(line, "/*") || strings.HasPrefix(line, "*")
}

// BodyElision stands for a method body in an outline.
func (Language) BodyElision() string { return "// ..." }

// Definitions lists every type, each followed by its members in source
// order, depth first: its methods and constructors (one per name) and its
// nested types.
func (Language) Definitions(f *lang.File) ([]lang.Definition, bool) {
	var out []lang.Definition
	seen := map[string]bool{}
	var visit func(d *lang.Def, parent string)
	visit = func(d *lang.Def, parent string) {
		if seen[d.QualName] {
			return
		}
		seen[d.QualName] = true
		out = append(out, lang.Definition{Def: d, Parent: parent})
		for _, c := range d.Children {
			visit(c, d.QualName)
		}
	}
	for _, d := range f.Defs {
		visit(d, "")
	}
	return out, true
}

// ModuleOf is an entity's outermost type, the module its gold names: a
// nested type's method "Outer.Inner.m" is in module "Outer".
func (Language) ModuleOf(qual string) string {
	outer, _, _ := strings.Cut(qual, ".")
	return outer
}

// Gold is the Python rule carried over to Java: a changed line inside a
// method or constructor names "Type.m" (module: the outermost type);
// elsewhere in a type's body — fields, initializers, annotations, the
// declaration line — the innermost type around it; package and import
// lines, comments and lines outside every type give the file only.
func (l Language) Gold(f *lang.File) lang.GoldRule {
	g := lang.NewSpanGold(l.IsComment)
	// Inner spans first: a line names the first span that holds it.
	var add func(d *lang.Def)
	add = func(d *lang.Def) {
		for _, c := range d.Children {
			add(c)
		}
		g.Add(lang.Entity{Name: d.QualName, Class: d.Kind == lang.KindClass}, d.Span)
	}
	for _, d := range f.Defs {
		add(d)
	}
	return g
}

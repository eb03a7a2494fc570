// Package golang is a2farm's Go: files read with tree-sitter-go, the code
// graph's nodes and edges for Go (types as classes, functions, methods as
// Type.Method), the gold rule for Go patches and what the tools hide
// (_test.go files, testdata/).
//
// Ids: "path.go" (file), "path.go:Type" for every top-level type spec,
// grouped or not, "path.go:Func" for a top-level function and
// "path.go:Type.Method" for a method, named by its receiver's base type
// (pointer and type parameters stripped). Several init functions of one
// file are one node. A type contains the methods declared in its own file;
// a method declared in another file hangs from that file.
package golang

import (
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// version changes whenever the output for the same source changes.
const version = "1"

// Language is Go.
type Language struct{}

var _ lang.Language = Language{}

// Name identifies the language.
func (Language) Name() string { return "go" }

// Aliases are the names dataset rows give Go.
func (Language) Aliases() []string { return []string{"golang"} }

// Version is part of every cache key.
func (Language) Version() string { return version }

// NewParser returns a tree-sitter-go parser.
func (Language) NewParser() (lang.Parser, error) { return newParser() }

// Extensions are Go's source files.
func (Language) Extensions() []string { return []string{".go"} }

// Reads takes every .go file outside vendor/ and testdata/ folders.
func (Language) Reads(p string) bool {
	return strings.HasSuffix(p, ".go") && !lang.InFolder(p, "vendor", "testdata")
}

// IsTest reports _test.go files and anything under testdata/.
func (Language) IsTest(p string) bool {
	return strings.HasSuffix(p, "_test.go") || lang.InFolder(p, "testdata")
}

// CanonicalID is the id itself: Go has no initializer to fold.
func (Language) CanonicalID(id string) string { return id }

// IsComment reports a line comment or the start of a block comment.
func (Language) IsComment(line string) bool {
	return strings.HasPrefix(line, "//") || strings.HasPrefix(line, "/*")
}

// BodyElision stands for a function body in an outline.
func (Language) BodyElision() string { return "// ..." }

// Definitions lists the file's types and functions, then its methods, so
// that a method comes after the type it hangs from; a method whose type is
// declared in another file hangs from the file. A name met twice (several
// init functions) is one definition, its first.
func (Language) Definitions(f *lang.File) ([]lang.Definition, bool) {
	types := map[string]bool{}
	seen := map[string]bool{}
	var out, methods []lang.Definition
	for _, d := range f.Defs {
		if seen[d.QualName] {
			continue
		}
		seen[d.QualName] = true
		switch {
		case d.Method:
			methods = append(methods, lang.Definition{Def: d})
		default:
			if d.Kind == lang.KindClass {
				types[d.Name] = true
			}
			out = append(out, lang.Definition{Def: d})
		}
	}
	for _, m := range methods {
		if recv, _, _ := strings.Cut(m.Def.QualName, "."); types[recv] {
			m.Parent = recv
		}
		out = append(out, m)
	}
	return out, true
}

// Package typescript is a2farm's TypeScript and JavaScript: files read
// with tree-sitter-typescript (TypeScript and TSX) and
// tree-sitter-javascript, the code graph's nodes and edges for them, the
// gold rule for their patches and what the tools hide (tests).
//
// Ids: "path.ts" (file), "path.ts:Class" for a top-level class
// declaration (exported, default or abstract too), "path.ts:f" for a
// top-level function declaration or a top-level const/let/var whose
// initializer is an arrow function or function expression, and
// "path.ts:Class.m" for a method, the constructor, a getter or setter
// (one id per name) and a class property initialized with a function.
package typescript

import (
	"path"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// version changes whenever the output for the same source changes.
const version = "1"

// Language is TypeScript and JavaScript.
type Language struct{}

var _ lang.Language = Language{}

// Name identifies the language.
func (Language) Name() string { return "typescript" }

// Aliases are the names dataset rows give TypeScript and JavaScript
// (SWE-bench Pro's repo_language says "js" and "ts").
func (Language) Aliases() []string { return []string{"ts", "js", "javascript", "tsx", "jsx"} }

// Version is part of every cache key.
func (Language) Version() string { return version }

// NewParser returns a parser for every extension the language reads.
func (Language) NewParser() (lang.Parser, error) { return newParser() }

// extensions are the source files, TypeScript's first.
var extensions = []string{".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs"}

// Extensions are TypeScript's and JavaScript's source files.
func (Language) Extensions() []string { return append([]string(nil), extensions...) }

// Reads takes the source files outside node_modules/, vendor/, dist/ and
// build/, but no declaration file (.d.ts) and no minified script.
func (Language) Reads(p string) bool {
	return slices.Contains(extensions, path.Ext(p)) && !strings.HasSuffix(p, ".d.ts") && !strings.HasSuffix(p, ".min.js") &&
		!lang.InFolder(p, "node_modules", "vendor", "dist", "build")
}

// IsTest reports files under test/, tests/, __tests__/ or spec/ folders
// and *.test.* or *.spec.* files.
func (Language) IsTest(p string) bool {
	if lang.InFolder(p, "test", "tests", "__tests__", "spec") {
		return true
	}
	base := path.Base(p)
	return strings.Contains(base, ".test.") || strings.Contains(base, ".spec.")
}

// SkipsGold keeps tests out of gold.
func (l Language) SkipsGold(p string) bool { return l.IsTest(p) }

// CanonicalID is the id itself.
func (Language) CanonicalID(id string) string { return id }

// IsComment reports a comment-only line.
func (Language) IsComment(line string) bool {
	return strings.HasPrefix(line, "//") || strings.HasPrefix(line, "/*") || strings.HasPrefix(line, "*")
}

// BodyElision stands for a function body in an outline.
func (Language) BodyElision() string { return "// ..." }

// Definitions lists each top-level class followed by its methods, and the
// top-level functions, in source order.
func (Language) Definitions(f *lang.File) ([]lang.Definition, bool) {
	var out []lang.Definition
	seen := map[string]bool{}
	for _, d := range f.Defs {
		if seen[d.QualName] {
			continue
		}
		seen[d.QualName] = true
		out = append(out, lang.Definition{Def: d})
		for _, m := range d.Children {
			if !seen[m.QualName] {
				seen[m.QualName] = true
				out = append(out, lang.Definition{Def: m, Parent: d.QualName})
			}
		}
	}
	return out, true
}

package python

import (
	"path"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// Language is Python for a2farm's language contract: its parser, source
// and test files, the definitions that are graph nodes, the reference's
// linking of imports and calls, its gold rule and its initializer.
type Language struct{}

var _ lang.Language = Language{}

// version is bumped whenever the output for the same source changes; the
// grammar's own version is part of it.
const version = "tree-sitter-python-0.23.6.1"

// Name is "python".
func (Language) Name() string { return "python" }

// Aliases are the names dataset rows give Python.
func (Language) Aliases() []string { return []string{"py", "python3"} }

// Version names the grammar and the revision of the rules.
func (Language) Version() string { return version }

// NewParser returns a tree-sitter Python parser.
func (Language) NewParser() (lang.Parser, error) {
	p, err := NewParser()
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return p, nil
}

// Extensions is ".py": gold, answers and mentions look at .py files only,
// as the reference does.
func (Language) Extensions() []string { return []string{".py"} }

// Reads reports .py files and Cython's .pyx and .pxd, which the
// reference's graph builder parses too.
func (Language) Reads(p string) bool {
	switch path.Ext(p) {
	case ".py", ".pyx", ".pxd":
		return true
	}
	return false
}

// IsTest is the reference search index's test exclusion: the globs
// **/test/**, **/tests/**, **/test_*.py and **/*_test.py.
func (Language) IsTest(p string) bool {
	if lang.InFolder(p, "test", "tests") {
		return true
	}
	base := path.Base(p)
	return strings.HasPrefix(base, "test_") && strings.HasSuffix(base, ".py") || strings.HasSuffix(base, "_test.py")
}

// initializer is the method that initialises an instance: the graph gives
// it no node of its own, its calls count for the class, and ids fold
// "C.__init__" into "C".
const initializer = "__init__"

// CanonicalID folds a trailing ".__init__" into its class.
func (Language) CanonicalID(id string) string { return strings.TrimSuffix(id, "."+initializer) }

// IsComment reports a "#" comment line.
func (Language) IsComment(line string) bool { return strings.HasPrefix(line, "#") }

// BodyElision is Python's "...".
func (Language) BodyElision() string { return "..." }

// Definitions are every class and function of a file that parsed like
// Python would, except a synchronous __init__ directly in a class, whose
// lines belong to the class (nothing inside it is a node either). A file
// with syntax errors or Python 2 syntax keeps its file node only.
func (Language) Definitions(f *lang.File) ([]lang.Definition, bool) {
	if f == nil || f.HasErrors || f.LegacySyntax {
		return nil, false
	}
	var defs []lang.Definition
	var visit func(children []*lang.Def, parent *lang.Def)
	visit = func(children []*lang.Def, parent *lang.Def) {
		for _, d := range children {
			if isHiddenInit(d, parent) {
				continue
			}
			p := ""
			if parent != nil {
				p = parent.QualName
			}
			defs = append(defs, lang.Definition{Def: d, Parent: p})
			visit(d.Children, d)
		}
	}
	visit(f.Defs, nil)
	return defs, true
}

// isHiddenInit: a synchronous initializer whose enclosing definition is a
// class is not a graph node.
func isHiddenInit(d, parent *lang.Def) bool {
	return parent != nil && parent.Kind == lang.KindClass && d.Kind == lang.KindFunction &&
		d.Name == initializer && !d.Async
}

// moduleFiles maps a dotted module name to the files it may live in, in
// order of preference: "a.b" → a/b.py, then a/b/__init__.py.
func moduleFiles(module string) []string {
	rel := strings.ReplaceAll(module, ".", "/")
	return []string{rel + ".py", path.Join(rel, "__init__.py")}
}

// packageFile reports a package's own module, __init__.py, whose imported
// names the package re-exports.
func packageFile(p string) bool { return strings.HasSuffix(p, "__init__.py") }

// docstringLines counts the lines of inspect.cleandoc(text) as
// str.splitlines does; 0 when empty.
func docstringLines(text string) int {
	cleaned := CleanDocstring(text)
	if cleaned == "" {
		return 0
	}
	return len(SplitLines(cleaned))
}

package pyparse

import (
	"path"
	"strings"

	"github.com/a2farm/a2farm/internal/lang"
)

// Python is the Python language for package lang's seam: its parser, source
// and test files, module layout and initializer.
type Python struct{}

var _ lang.Language = Python{}

// Name is "python".
func (Python) Name() string { return "python" }

// NewParser returns a tree-sitter Python parser.
func (Python) NewParser() (lang.Parser, error) {
	p, err := NewParser()
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return p, nil
}

// Extensions is ".py": gold, answers and mentions look at .py files only,
// as the reference does.
func (Python) Extensions() []string { return []string{".py"} }

// Indexed reports .py files and Cython's .pyx and .pxd, which the
// reference's graph builder parses too.
func (Python) Indexed(p string) bool {
	switch path.Ext(p) {
	case ".py", ".pyx", ".pxd":
		return true
	}
	return false
}

// IsTest is the reference search index's test exclusion: the globs
// **/test/**, **/tests/**, **/test_*.py and **/*_test.py.
func (Python) IsTest(p string) bool {
	for _, dir := range strings.Split(path.Dir(p), "/") {
		if dir == "test" || dir == "tests" {
			return true
		}
	}
	base := path.Base(p)
	return strings.HasPrefix(base, "test_") && strings.HasSuffix(base, ".py") || strings.HasSuffix(base, "_test.py")
}

// ModuleFiles maps "a.b" to a/b.py, then a/b/__init__.py.
func (Python) ModuleFiles(module string) []string {
	rel := strings.ReplaceAll(module, ".", "/")
	return []string{rel + ".py", path.Join(rel, "__init__.py")}
}

// PackageFile reports a package's __init__.py.
func (Python) PackageFile(p string) bool { return strings.HasSuffix(p, "__init__.py") }

// Initializer is "__init__".
func (Python) Initializer() string { return "__init__" }

// DocstringLines counts the lines of inspect.cleandoc(text) as
// str.splitlines does.
func (Python) DocstringLines(text string) int {
	cleaned := CleanDocstring(text)
	if cleaned == "" {
		return 0
	}
	return len(SplitLines(cleaned))
}

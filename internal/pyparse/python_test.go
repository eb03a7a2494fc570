package pyparse

import (
	"slices"
	"testing"

	"github.com/a2farm/a2farm/internal/lang"
)

func TestPythonTestFiles(t *testing.T) {
	for p, want := range map[string]bool{
		"tests/test_a.py": true, "pkg/test/util.py": true, "pkg/test_x.py": true, "pkg/x_test.py": true,
		"test_top.py": true, "pkg/testing/x.py": false, "pkg/contest.py": false, "pkg/tests.py": false,
	} {
		if got := (Python{}).IsTest(p); got != want {
			t.Errorf("IsTest(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestPythonLayout(t *testing.T) {
	py := Python{}
	if got := py.ModuleFiles("a.b"); !slices.Equal(got, []string{"a/b.py", "a/b/__init__.py"}) {
		t.Errorf("ModuleFiles(a.b) = %v", got)
	}
	for p, want := range map[string]bool{"a.py": true, "a.pyx": true, "a.pxd": true, "a.pyi": false, "a.txt": false} {
		if got := py.Indexed(p); got != want {
			t.Errorf("Indexed(%q) = %v, want %v", p, got, want)
		}
	}
	if !py.PackageFile("pkg/__init__.py") || py.PackageFile("pkg/init.py") {
		t.Error("PackageFile must recognise exactly __init__.py")
	}
	if got := lang.SourceGlob(py); got != "**/*.py" {
		t.Errorf("SourceGlob = %q", got)
	}
	if got := lang.ExtensionPattern(py); got != `\.py` {
		t.Errorf("ExtensionPattern = %q", got)
	}
	if got := lang.QualifiedInitializer(py); got != ".__init__" {
		t.Errorf("QualifiedInitializer = %q", got)
	}
	for text, want := range map[string]int{"": 0, "One line.": 1, "Two\n    lines.\n    ": 2} {
		if got := py.DocstringLines(text); got != want {
			t.Errorf("DocstringLines(%q) = %d, want %d", text, got, want)
		}
	}
}

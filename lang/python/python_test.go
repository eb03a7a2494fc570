package python

import (
	"slices"
	"testing"

	"github.com/a2farm/a2farm/lang"
)

func TestPythonTestFiles(t *testing.T) {
	for p, want := range map[string]bool{
		"tests/test_a.py": true, "pkg/test/util.py": true, "pkg/test_x.py": true, "pkg/x_test.py": true,
		"test_top.py": true, "pkg/testing/x.py": false, "pkg/contest.py": false, "pkg/tests.py": false,
	} {
		if got := (Language{}).IsTest(p); got != want {
			t.Errorf("IsTest(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestPythonLayout(t *testing.T) {
	py := Language{}
	if got := moduleFiles("a.b"); !slices.Equal(got, []string{"a/b.py", "a/b/__init__.py"}) {
		t.Errorf("moduleFiles(a.b) = %v", got)
	}
	for p, want := range map[string]bool{"a.py": true, "a.pyx": true, "a.pxd": true, "a.pyi": false, "a.txt": false} {
		if got := py.Reads(p); got != want {
			t.Errorf("Reads(%q) = %v, want %v", p, got, want)
		}
	}
	if !packageFile("pkg/__init__.py") || packageFile("pkg/init.py") {
		t.Error("packageFile must recognise exactly __init__.py")
	}
	set := lang.NewSet(py)
	if got := set.SourceGlob(); got != "**/*.py" {
		t.Errorf("SourceGlob = %q", got)
	}
	if got := set.ExtensionPattern(); got != `\.py` {
		t.Errorf("ExtensionPattern = %q", got)
	}
	for id, want := range map[string]string{"a.py:C.__init__": "a.py:C", "a.py:C.run": "a.py:C.run", "a.py:f": "a.py:f", "C.__init__": "C", "a.txt:C.__init__": "a.txt:C"} {
		if got := set.CanonicalID(id); got != want {
			t.Errorf("CanonicalID(%q) = %q, want %q", id, got, want)
		}
	}
	for text, want := range map[string]int{"": 0, "One line.": 1, "Two\n    lines.\n    ": 2} {
		if got := docstringLines(text); got != want {
			t.Errorf("docstringLines(%q) = %d, want %d", text, got, want)
		}
	}
}

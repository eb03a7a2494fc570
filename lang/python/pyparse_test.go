package python

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/golden"
)

func newTestParser(t testing.TB) *Parser {
	t.Helper()
	p, err := NewParser()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestParseStructureGolden(t *testing.T) {
	src, err := os.ReadFile("testdata/structure.py")
	if err != nil {
		t.Fatal(err)
	}
	f, err := newTestParser(t).Parse("pkg/sub/structure.py", src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "structure.golden.json", append(out, '\n'))
}

func TestBreadthFirstOrder(t *testing.T) {
	src, err := os.ReadFile("testdata/structure.py")
	if err != nil {
		t.Fatal(err)
	}
	f, err := newTestParser(t).Parse("pkg/sub/structure.py", src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range f.BreadthFirst() {
		got = append(got, d.QualName)
	}
	// Depths as Python's ast sees them: module-level defs 1; methods, defs
	// in an if/try body and the first elif 2 or 3; the second elif and the
	// else after it are one If deeper.
	want := []string{
		"top", "Outer", "atop", // depth 1
		"top.inner", "Outer.Inner", "Outer.__init__", "Outer.value", "Outer.fetch", "branch_if", // depth 2
		"Outer.Inner.method", "Outer.conditional", "branch_elif", "fallback", // depth 3
		"branch_elif2", "branch_else", // depth 4
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("breadth-first order:\n got %v\nwant %v", got, want)
	}
}

func TestResolveModule(t *testing.T) {
	tests := []struct {
		path   string
		level  int
		module string
		want   string
	}{
		{"pkg/sub/mod.py", 0, "os.path", "os.path"},
		{"pkg/sub/mod.py", 1, "", "pkg.sub"},
		{"pkg/sub/mod.py", 1, "util", "pkg.sub.util"},
		{"pkg/sub/mod.py", 2, "core", "pkg.core"},
		{"pkg/sub/__init__.py", 1, "x", "pkg.sub.x"},
		{"pkg/sub/mod.py", 3, "top", "top"},
		{"pkg/sub/mod.py", 4, "x", "x"}, // above the root: resolved from the root, as the reference does
		{"setup.py", 1, "x", "x"},
		{"setup.py", 1, "", ""},
	}
	for _, tt := range tests {
		if got := resolveModule(tt.path, tt.level, tt.module); got != tt.want {
			t.Errorf("resolveModule(%q, %d, %q) = %q, want %q", tt.path, tt.level, tt.module, got, tt.want)
		}
	}
}

func TestSpansMatchPythonAST(t *testing.T) {
	src := "class A:\n" + // 1
		"    @staticmethod\n" + // 2
		"    def f(\n" + // 3
		"        x,\n" + // 4
		"    ):\n" + // 5
		"        return (\n" + // 6
		"            x\n" + // 7
		"        )\n" + // 8
		"        # comment after the last statement\n" + // 9
		"\n" + // 10
		"    # class-level comment\n" + // 11
		"x = 1\n" // 12
	f, err := newTestParser(t).Parse("a.py", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Defs) != 1 {
		t.Fatalf("defs = %d, want 1", len(f.Defs))
	}
	a := f.Defs[0]
	if a.Span != (Span{Start: 1, End: 8}) {
		t.Errorf("class span = %v, want {1 8}", a.Span)
	}
	m := a.Children[0]
	if m.Span != (Span{Start: 3, End: 8}) || !m.Method {
		t.Errorf("method span = %v method=%v, want {3 8} true", m.Span, m.Method)
	}
	if len(m.Decorators) != 1 || m.Decorators[0].Span != (Span{Start: 2, End: 2}) || m.Decorators[0].Name != "staticmethod" {
		t.Errorf("decorators = %+v", m.Decorators)
	}
	if f.Lines != 12 {
		t.Errorf("lines = %d, want 12", f.Lines)
	}
}

func TestDecodeStringLiteral(t *testing.T) {
	tests := []struct {
		lit  string
		want string
		ok   bool
	}{
		{`"plain"`, "plain", true},
		{`'''a\nb'''`, "a\nb", true},
		{`r"""a\nb"""`, `a\nb`, true},
		{`u"\x41\u00e9\101"`, "Aé" + "A", true},
		{"\"a\\\nb\"", "ab", true},
		{`"\q"`, `\q`, true},
		{`b"bytes"`, "", false},
		{`f"{x}"`, "", false},
		{`Rb'x'`, "", false},
		{`"\N{BULLET}x"`, "\uFFFDx", true},
	}
	for _, tt := range tests {
		got, ok := decodeStringLiteral(tt.lit)
		if got != tt.want || ok != tt.ok {
			t.Errorf("decodeStringLiteral(%s) = %q, %v; want %q, %v", tt.lit, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCleanDocstring(t *testing.T) {
	tests := []struct{ in, want string }{
		{"\n    Summary.\n\n    Body.\n    ", "Summary.\n\nBody."},
		{"One line.", "One line."},
		{"  First\n      indented\n    base", "First\n  indented\nbase"},
		{"\n\n", ""},
	}
	for _, tt := range tests {
		if got := CleanDocstring(tt.in); got != tt.want {
			t.Errorf("CleanDocstring(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplitLines(t *testing.T) {
	got := SplitLines("a\nb\r\nc\rd\x0be\u2028f\n")
	want := []string{"a", "b", "c", "d", "e", "f"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("SplitLines = %q, want %q", got, want)
	}
}

func TestParseAfterCloseFails(t *testing.T) {
	p, err := NewParser()
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	p.Close() // idempotent
	if _, err := p.Parse("x.py", []byte("x = 1\n")); err != ErrClosed {
		t.Fatalf("Parse after Close: err = %v, want ErrClosed", err)
	}
}

func TestSyntaxErrorIsReported(t *testing.T) {
	f, err := newTestParser(t).Parse("bad.py", []byte("def f(:\n    pass\n\nclass Ok:\n    pass\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !f.HasErrors {
		t.Error("HasErrors = false for a file with a syntax error")
	}
}

func TestLegacySyntax(t *testing.T) {
	tests := []struct {
		src    string
		legacy bool
	}{
		{"x = 1\n", false},
		{"print 'hello'\n", true},
		{"exec 'x = 1'\n", true},
		{"def f():\n    \"\"\"Use C:\\users\\me.\"\"\"\n", true},
		{"s = r'C:\\users'\n", false},
		{"s = b'\\users'\n", false},
		{"s = '\\u00e9 \\U0001F600 \\N{BULLET}'\n", false},
		{"s = '\\U00110000'\n", true},
		{"s = '\\\\users'\n", false}, // an escaped backslash, then "users"
	}
	p := newTestParser(t)
	for _, tt := range tests {
		f, err := p.Parse("x.py", []byte(tt.src))
		if err != nil {
			t.Fatal(err)
		}
		if f.LegacySyntax != tt.legacy {
			t.Errorf("%q: LegacySyntax = %v, want %v", tt.src, f.LegacySyntax, tt.legacy)
		}
	}
}

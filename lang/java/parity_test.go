package java

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/needs"
	"github.com/a2farm/a2farm/lang"
)

// fileView is what the graph and gold are built from, one file's worth:
// its package, every type and method ("kind Qual.Name start-end", in
// source order, overloads each) and every import ("static a.b.C.m",
// "a.b.*").
type fileView struct {
	Path    string   `json:"path"`
	Package string   `json:"package"`
	Defs    []string `json:"defs"`
	Imports []string `json:"imports"`
}

// javacViews runs testdata/JavacView.java — the JDK's own parser, the
// javac tree API — over files (relative to root).
func javacViews(t *testing.T, root string, files []string) map[string]fileView {
	t.Helper()
	java := needs.Program(t, "a JDK 17 or newer (java)", "apt-get install openjdk-17-jdk-headless (.ci/run does)", "java")
	// The file list goes through an argument file: a repository's paths
	// outgrow a command line.
	list := filepath.Join(t.TempDir(), "files")
	if err := os.WriteFile(list, []byte(strings.Join(files, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	view, err := filepath.Abs(filepath.Join("testdata", "JavacView.java"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(java, view, root, "@"+list)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("javac view: %v\n%s", err, stderr.String())
	}
	views := map[string]fileView{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v fileView
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("javac view: %v: %s", err, sc.Text())
		}
		views[v.Path] = v
	}
	return views
}

// treeSitterView is the same view of a file parsed by this package.
func treeSitterView(t *testing.T, p *parser, root, rel string) fileView {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.Parse(rel, src)
	if err != nil {
		t.Fatal(err)
	}
	v := fileView{Path: rel, Package: f.Package, Defs: []string{}, Imports: []string{}}
	f.Walk(func(d *lang.Def) bool {
		v.Defs = append(v.Defs, fmt.Sprintf("%s %s %d-%d", d.Kind, d.QualName, d.Span.Start, d.Span.End))
		return true
	})
	for _, imp := range f.Imports {
		s := imp.Module
		if imp.From {
			s = "static " + s
		}
		for _, n := range imp.Names {
			s += "." + n.Name
		}
		if imp.Star {
			s += ".*"
		}
		v.Imports = append(v.Imports, s)
	}
	return v
}

// javaFiles lists the files under root that the language reads.
func javaFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && rel != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && (Language{}).Reads(rel) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestAgreesWithJavac parses the fixtures (and JavacView.java itself)
// with tree-sitter-java through this package and with javac, and requires
// the same package, the same types and methods with the same ids, kinds
// and line spans, and the same imports.
func TestAgreesWithJavac(t *testing.T) {
	root := "testdata"
	files := javaFiles(t, root)
	if len(files) < 4 {
		t.Fatalf("%d fixture files; want the fixtures and JavacView.java", len(files))
	}
	views := javacViews(t, root, files)
	p, err := newParser()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defs := 0
	for _, rel := range files {
		want, ok := views[rel]
		if !ok {
			t.Fatalf("javac did not read %s", rel)
		}
		got := treeSitterView(t, p, root, rel)
		if got.Package != want.Package || !slices.Equal(got.Defs, want.Defs) || !slices.Equal(got.Imports, want.Imports) {
			t.Errorf("%s:\n tree-sitter %+v\n javac       %+v", rel, got, want)
		}
		defs += len(want.Defs)
	}
	t.Logf("%d files, %d definitions: the same packages, ids, kinds, spans and imports", len(files), defs)
}

// TestAgreesWithJavacOnARepository compares every Java file of a
// checkout (A2FARM_JAVA_PARITY_ROOT: a working tree, e.g. google/gson
// or FasterXML/jackson-databind) and reports the agreement: files alike
// in every respect, definitions and imports found by both. make
// java-parity runs it; docs/BENCHMARKS.md has the figures.
func TestAgreesWithJavacOnARepository(t *testing.T) {
	root := os.Getenv("A2FARM_JAVA_PARITY_ROOT")
	if root == "" {
		t.Skip("set A2FARM_JAVA_PARITY_ROOT to a Java checkout (make java-parity)")
	}
	files := javaFiles(t, root)
	views := javacViews(t, root, files)
	p, err := newParser()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var alike, defsBoth, defsJavac, defsTS, impBoth, impJavac, impTS, spans, spansAlike int
	shown := 0
	for _, rel := range files {
		want := views[rel]
		got := treeSitterView(t, p, root, rel)
		if got.Package == want.Package && slices.Equal(got.Defs, want.Defs) && slices.Equal(got.Imports, want.Imports) {
			alike++
		} else if shown < 10 {
			shown++
			t.Logf("differs: %s\n tree-sitter %v %v\n javac       %v %v", rel, got.Defs, got.Imports, want.Defs, want.Imports)
		}
		both, onlyJavac, onlyTS := overlap(ids(got.Defs), ids(want.Defs))
		defsBoth, defsJavac, defsTS = defsBoth+both, defsJavac+onlyJavac, defsTS+onlyTS
		s, sa := sameSpans(got.Defs, want.Defs)
		spans, spansAlike = spans+s, spansAlike+sa
		both, onlyJavac, onlyTS = overlap(got.Imports, want.Imports)
		impBoth, impJavac, impTS = impBoth+both, impJavac+onlyJavac, impTS+onlyTS
	}
	defAgree := float64(defsBoth) / float64(max(1, defsBoth+defsJavac+defsTS))
	impAgree := float64(impBoth) / float64(max(1, impBoth+impJavac+impTS))
	t.Logf("%s: %d files, %d alike in every respect (%.4f); definitions %d both, %d javac only, %d tree-sitter only (agreement %.4f); spans %d/%d alike; imports %d both, %d javac only, %d tree-sitter only (agreement %.4f)",
		root, len(files), alike, float64(alike)/float64(max(1, len(files))), defsBoth, defsJavac, defsTS, defAgree, spansAlike, spans, impBoth, impJavac, impTS, impAgree)
	if defAgree < 0.99 || impAgree < 0.99 {
		t.Errorf("agreement below 0.99")
	}
}

// ids are the "kind Qual.Name" parts of definitions, spans cut off.
func ids(defs []string) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d[:strings.LastIndexByte(d, ' ')]
	}
	return out
}

// overlap counts the items of two multisets found in both, only in b (javac)
// and only in a (tree-sitter).
func overlap(a, b []string) (both, onlyB, onlyA int) {
	count := map[string]int{}
	for _, x := range b {
		count[x]++
	}
	for _, x := range a {
		if count[x] > 0 {
			count[x]--
			both++
		} else {
			onlyA++
		}
	}
	for _, n := range count {
		onlyB += n
	}
	return both, onlyB, onlyA
}

// sameSpans counts the definitions found by both (by id, in order) and
// those whose spans agree.
func sameSpans(a, b []string) (n, alike int) {
	byID := map[string][]string{}
	for _, d := range b {
		id := d[:strings.LastIndexByte(d, ' ')]
		byID[id] = append(byID[id], d)
	}
	for _, d := range a {
		id := d[:strings.LastIndexByte(d, ' ')]
		if list := byID[id]; len(list) > 0 {
			n++
			if list[0] == d {
				alike++
			}
			byID[id] = list[1:]
		}
	}
	return n, alike
}

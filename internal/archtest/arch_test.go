package archtest

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/a2farm/a2farm"

// pkg is what the checks need to know about one package.
type pkg struct {
	path    string          // import path
	imports map[string]bool // non-test imports
	hasDoc  bool
	cgo     bool
}

// ignored reports whether a file is excluded from every build by the
// "ignore" build tag, the convention for scripts run with go run.
func ignored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if expr, err := constraint.Parse(c.Text); err == nil {
				return !expr.Eval(func(tag string) bool { return tag != "ignore" })
			}
		}
	}
	return false
}

func loadPackages(t *testing.T) map[string]*pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]*pkg{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if ignored(f) {
			return nil // a standalone program (go run file.go), in no package
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		ip := module
		if rel != "." {
			ip += "/" + filepath.ToSlash(rel)
		}
		p := pkgs[ip]
		if p == nil {
			p = &pkg{path: ip, imports: map[string]bool{}}
			pkgs[ip] = p
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name) || f.Doc != nil && f.Name.Name == "main" {
			p.hasDoc = true
		}
		for _, imp := range f.Imports {
			s, _ := strconv.Unquote(imp.Path.Value)
			if s == "C" {
				p.cgo = true
				continue
			}
			p.imports[s] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 5 {
		t.Fatalf("found only %d packages; is the walk rooted right?", len(pkgs))
	}
	return pkgs
}

func under(path, dir string) bool {
	full := module + "/" + dir
	return path == full || strings.HasPrefix(path, full+"/")
}

func isStdlib(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

func TestPackagesHaveDocComments(t *testing.T) {
	for _, p := range loadPackages(t) {
		if !p.hasDoc {
			t.Errorf("%s has no package doc comment", p.path)
		}
	}
}

func TestOnlyPyparseUsesCgo(t *testing.T) {
	for _, p := range loadPackages(t) {
		if p.cgo && p.path != module+"/internal/pyparse" {
			t.Errorf("%s uses cgo; only internal/pyparse may", p.path)
		}
	}
}

// layer places a package in the house, top-down: the binary (4), the CLI
// (3), the roles — coordinator, worker, learner — (2), the libraries
// under internal/ (1) and the contracts in schema (0). docs/ARCHITECTURE.md
// draws it.
func layer(path string) int {
	switch {
	case under(path, "cmd"):
		return 4
	case under(path, "internal/cli"):
		return 3
	case under(path, "coordinator"), under(path, "worker"), under(path, "learner"), under(path, "deploy"):
		return 2
	case under(path, "internal"):
		return 1
	case under(path, "schema"):
		return 0
	}
	return -1
}

// testOnly are the packages that only tests may import: the embedded
// test server, the polling helper, golden files, the policy stand-in and
// the graph fixture.
var testOnly = []string{"internal/natstest", "internal/checkfor", "internal/golden", "internal/policytest", "internal/browsertest",
	"worker/codegraph/graphtest"}

var layerNames = [...]string{"schema", "a library (internal/)", "a role", "the CLI", "the binary"}

// TestImportRules enforces the layering of docs/ARCHITECTURE.md: nothing
// imports a package of a higher layer; the roles share code only through
// internal/ and schema.
func TestImportRules(t *testing.T) {
	pkgs := loadPackages(t)
	for _, p := range pkgs {
		from := layer(p.path)
		if from < 0 {
			t.Errorf("%s belongs to no layer; place it in layer()", p.path)
			continue
		}
		for imp := range p.imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := layer(imp)
			switch {
			case slices.ContainsFunc(testOnly, func(dir string) bool { return under(imp, dir) }): // only non-test files are loaded here
				t.Errorf("%s imports %s: it is for tests only", p.path, imp)
			case to > from:
				t.Errorf("%s (%s) imports %s (%s): a lower layer never imports a higher one", p.path, layerNames[from], imp, layerNames[to])
			case (under(p.path, "learner") || under(p.path, "coordinator")) && under(imp, "worker"):
				t.Errorf("%s imports %s: learner and coordinator never import worker", p.path, imp)
			case under(p.path, "learner") && under(imp, "coordinator"),
				under(p.path, "worker") && (under(imp, "coordinator") || under(imp, "learner")):
				t.Errorf("%s imports %s: roles share code only through internal/ and schema", p.path, imp)
			}
		}
	}
}

// TestLanguageSeam keeps Python behind package lang: only the parser
// itself and the CLI, which chooses the language, may reach
// internal/pyparse, directly or through other packages. Everything else
// (graph, search, tools, agent, gold, rewards, metrics, roles) sees
// languages only as lang.Language.
func TestLanguageSeam(t *testing.T) {
	pkgs := loadPackages(t)
	python := module + "/internal/pyparse"
	reaches := map[string]bool{}
	var visit func(path string) bool
	visiting := map[string]bool{}
	visit = func(path string) bool {
		if r, ok := reaches[path]; ok {
			return r
		}
		if visiting[path] {
			return false
		}
		visiting[path] = true
		r := false
		if p := pkgs[path]; p != nil {
			for imp := range p.imports {
				if imp == python || strings.HasPrefix(imp, module) && visit(imp) {
					r = true
				}
			}
		}
		reaches[path] = r
		return r
	}
	for path := range pkgs {
		if path == python || under(path, "internal/cli") || under(path, "cmd") {
			continue
		}
		if visit(path) {
			t.Errorf("%s reaches internal/pyparse; take a lang.Language instead", path)
		}
	}
	if !visit(module + "/internal/cli") {
		t.Error("internal/cli does not reach internal/pyparse: is the walk broken?")
	}
}

// TestLeafPackagesStayLeaves keeps the contracts and the parser free of
// heavy dependencies.
func TestLeafPackagesStayLeaves(t *testing.T) {
	allowed := map[string][]string{
		module + "/schema":            {"github.com/apache/arrow-go/"},
		module + "/internal/pyparse":  {"github.com/tree-sitter/", module + "/internal/lang"},
		module + "/internal/lang":     nil, // the seam: standard library only
		module + "/learner/advantage": nil, // the method itself: standard library only
	}
	pkgs := loadPackages(t)
	for path, prefixes := range allowed {
		p := pkgs[path]
		if p == nil {
			t.Errorf("package %s not found", path)
			continue
		}
		for imp := range p.imports {
			ok := isStdlib(imp) || slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(imp, pre) })
			if !ok {
				t.Errorf("%s imports %s; it may import only the standard library and %v", path, imp, prefixes)
			}
		}
	}
}

func TestMainStaysThin(t *testing.T) {
	data, err := os.ReadFile("../../cmd/a2farm/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 30 {
		t.Errorf("cmd/a2farm/main.go has %d lines; keep it to parse, build, run, exit", n)
	}
}

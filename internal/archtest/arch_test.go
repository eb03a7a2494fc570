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

// language reports whether path is a language's own package, lang/<x>;
// the contract, lang itself, is not one.
func language(path string) bool {
	rest, ok := strings.CutPrefix(path, module+"/lang/")
	return ok && rest != "" && !strings.Contains(rest, "/")
}

func TestOnlyLanguagesUseCgo(t *testing.T) {
	for _, p := range loadPackages(t) {
		if p.cgo && !language(p.path) {
			t.Errorf("%s uses cgo; only a language's package, lang/<x>, may (its grammar is C)", p.path)
		}
	}
}

// layer places a package in the house, top-down: the commands (3), the
// roles — coordinator, worker, learner — (2), the libraries under
// internal/ and the languages under lang/ (1) and the contracts in schema
// (0). docs/ARCHITECTURE.md draws it.
func layer(path string) int {
	switch {
	case under(path, "cmd"):
		return 3
	case under(path, "coordinator"), under(path, "worker"), under(path, "learner"), under(path, "deploy"):
		return 2
	case under(path, "internal"), under(path, "lang"):
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

var layerNames = [...]string{"schema", "a library (internal/, lang/)", "a role", "the commands (cmd/)"}

// TestImportRules enforces the layering of docs/ARCHITECTURE.md: nothing
// imports a package of a higher layer, nor cmd/; the roles share code
// only through internal/, lang and schema; a library under internal/
// sees languages only through the contract, lang.
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
			case under(imp, "cmd"):
				t.Errorf("%s imports %s: nothing imports the commands", p.path, imp)
			case to > from:
				t.Errorf("%s (%s) imports %s (%s): a lower layer never imports a higher one", p.path, layerNames[from], imp, layerNames[to])
			case under(p.path, "internal") && language(imp):
				t.Errorf("%s imports %s: internal/ sees languages only through lang", p.path, imp)
			case under(p.path, "lang") && !under(imp, "lang"):
				t.Errorf("%s imports %s: a language needs only the contract, lang", p.path, imp)
			case language(p.path) && language(imp):
				t.Errorf("%s imports %s: one language never imports another", p.path, imp)
			case (under(p.path, "learner") || under(p.path, "coordinator")) && under(imp, "worker"):
				t.Errorf("%s imports %s: learner and coordinator never import worker", p.path, imp)
			case under(p.path, "learner") && under(imp, "coordinator"),
				under(p.path, "worker") && (under(imp, "coordinator") || under(imp, "learner")):
				t.Errorf("%s imports %s: roles share code only through internal/, lang and schema", p.path, imp)
			}
		}
	}
}

// TestLanguageSeam keeps each language behind the contract: only the
// commands, which register the languages, reach a lang/<x> package,
// directly or through other packages. Everything else (graph, search,
// tools, agent, gold, rewards, metrics, roles) sees languages only as
// lang.Language and lang.Set.
func TestLanguageSeam(t *testing.T) {
	pkgs := loadPackages(t)
	reaches := map[string]bool{}
	visiting := map[string]bool{}
	var visit func(path string) bool
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
				if language(imp) || strings.HasPrefix(imp, module) && visit(imp) {
					r = true
				}
			}
		}
		reaches[path] = r
		return r
	}
	for path := range pkgs {
		if language(path) || under(path, "cmd") {
			continue
		}
		if visit(path) {
			t.Errorf("%s reaches a language's package; take a *lang.Set or lang.Set instead", path)
		}
	}
	if !visit(module + "/cmd/a2farm") {
		t.Error("cmd/a2farm reaches no language's package: is the walk broken?")
	}
}

// TestGrammarsStayInTheirLanguage: a tree-sitter grammar is imported by
// its own language's package only, and the tree-sitter binding by
// language packages only.
func TestGrammarsStayInTheirLanguage(t *testing.T) {
	for _, p := range loadPackages(t) {
		for imp := range p.imports {
			grammar, isGrammar := strings.CutPrefix(imp, "github.com/tree-sitter/tree-sitter-")
			switch {
			case isGrammar && !language(p.path):
				t.Errorf("%s imports the grammar %s; only its language's package may", p.path, imp)
			case isGrammar && !grammarOf(p.path, grammar):
				t.Errorf("%s imports the grammar %s, which is another language's", p.path, imp)
			case strings.HasPrefix(imp, "github.com/tree-sitter/go-tree-sitter") && !language(p.path):
				t.Errorf("%s imports tree-sitter; only a language's package may", p.path)
			}
		}
	}
}

// grammarOf reports whether the grammar module tree-sitter-<grammar>
// belongs to the language package at path: lang/python reads
// tree-sitter-python, lang/golang tree-sitter-go, lang/typescript both
// tree-sitter-typescript and tree-sitter-javascript.
func grammarOf(path, grammar string) bool {
	name := strings.TrimPrefix(path, module+"/lang/")
	grammar, _, _ = strings.Cut(grammar, "/")
	switch name {
	case "golang":
		return grammar == "go"
	case "typescript":
		return grammar == "typescript" || grammar == "javascript"
	}
	return grammar == name
}

// TestLeafPackagesStayLeaves keeps the contracts, the language seam and
// the method free of heavy dependencies.
func TestLeafPackagesStayLeaves(t *testing.T) {
	allowed := map[string][]string{
		module + "/schema":            {"github.com/apache/arrow-go/"},
		module + "/lang":              nil, // the seam: standard library only
		module + "/learner/advantage": nil, // the method itself: standard library only
	}
	pkgs := loadPackages(t)
	for path := range pkgs {
		if language(path) {
			allowed[path] = []string{"github.com/tree-sitter/", module + "/lang"}
		}
	}
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

// TestToolsFromOutsideGoAreNeeded: a test that looks for a program on the
// PATH does it through internal/needs, so that every such test skips with
// the same line and make test lists it. Benchmarks and the needs package
// itself are exempt.
func TestToolsFromOutsideGoAreNeeded(t *testing.T) {
	root := filepath.Join("..", "..")
	var found int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "node_modules" || d.Name() == "trainer") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() || !strings.HasSuffix(rel, "_test.go") || strings.HasSuffix(rel, "_bench_test.go") ||
			strings.HasPrefix(rel, "internal/needs/") || strings.HasPrefix(rel, "internal/archtest/") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found++
		if strings.Contains(string(data), "exec.LookPath(") {
			t.Errorf("%s looks a program up itself; use needs.Program, which skips in the one way make test lists", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("read %d test files; the walk lost the repository", found)
	}
}

package golang

import (
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestAgreesWithGoParser parses every Go file of this repository — real
// code, a few hundred files — with tree-sitter-go through this package
// and with the standard library's go/parser, and compares what the graph
// and gold are built from: every type, function and method with its id
// and line span, and every import path.
func TestAgreesWithGoParser(t *testing.T) {
	root := filepath.Join("..", "..")
	p, err := newParser()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	files, defs := 0, 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(Language{}).Reads(rel) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		want, wantImports, err := goParserView(src)
		if err != nil {
			return fmt.Errorf("%s: go/parser: %w", rel, err)
		}
		f, err := p.Parse(rel, src)
		if err != nil {
			return err
		}
		var got []string
		for _, d := range f.Defs {
			got = append(got, fmt.Sprintf("%s %s %d-%d", d.Kind, d.QualName, d.Span.Start, d.Span.End))
		}
		var gotImports []string
		for _, imp := range f.Imports {
			gotImports = append(gotImports, imp.Names[0].Alias+" "+imp.Module)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s definitions:\n tree-sitter %v\n go/parser   %v", rel, got, want)
		}
		if !slices.Equal(gotImports, wantImports) {
			t.Errorf("%s imports:\n tree-sitter %v\n go/parser   %v", rel, gotImports, wantImports)
		}
		files++
		defs += len(want)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("compared %d files; want this repository's few hundred", files)
	}
	t.Logf("%d files, %d definitions: the same ids, kinds, spans and imports", files, defs)
}

// goParserView is what go/parser says the definitions and imports are,
// in source order, written as the test compares them.
func goParserView(src []byte) (defs, imports []string, err error) {
	fset := token.NewFileSet()
	f, err := goparser.ParseFile(fset, "", src, goparser.SkipObjectResolution)
	if err != nil {
		return nil, nil, err
	}
	line := func(p token.Pos) int { return fset.Position(p).Line }
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = receiverBase(d.Recv.List[0].Type) + "." + name
			}
			defs = append(defs, fmt.Sprintf("function %s %d-%d", name, line(d.Pos()), line(d.End())))
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					defs = append(defs, fmt.Sprintf("class %s %d-%d", s.Name.Name, line(s.Pos()), line(s.End())))
				case *ast.ImportSpec:
					alias := ""
					if s.Name != nil {
						alias = s.Name.Name
					}
					path, _ := strconv.Unquote(s.Path.Value)
					imports = append(imports, alias+" "+path)
				}
			}
		}
	}
	return defs, imports, nil
}

func receiverBase(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// BenchmarkParseBeside parses the Go files under A2FARM_BENCH_GODIR (a
// checkout of a big Go repository) with this package's tree-sitter parser
// and with go/parser, side by side in one run (make bench-go).
func BenchmarkParseBeside(b *testing.B) {
	dir := os.Getenv("A2FARM_BENCH_GODIR")
	if dir == "" {
		b.Skip("set A2FARM_BENCH_GODIR to a checkout of a Go repository")
	}
	var paths []string
	var sources [][]byte
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !(Language{}).Reads(filepath.ToSlash(rel)) {
			return nil
		}
		src, err := os.ReadFile(path)
		paths, sources = append(paths, rel), append(sources, src)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("tree-sitter", func(b *testing.B) {
		p, err := newParser()
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for b.Loop() {
			for i, src := range sources {
				if _, err := p.Parse(paths[i], src); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(sources)), "files")
	})
	b.Run("go-parser", func(b *testing.B) {
		for b.Loop() {
			for _, src := range sources {
				if _, _, err := goParserView(src); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(sources)), "files")
	})
}

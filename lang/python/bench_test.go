package python

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkParse reports parse throughput on the structure fixture, and in
// ms per MiB (the unit of the targets in docs/ARCHITECTURE.md).
func BenchmarkParse(b *testing.B) {
	src, err := os.ReadFile("testdata/structure.py")
	if err != nil {
		b.Fatal(err)
	}
	benchmarkParse(b, "pkg/sub/structure.py", src)
}

func benchmarkParse(b *testing.B, path string, src []byte) {
	p := newTestParser(b)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Parse(path, src); err != nil {
			b.Fatal(err)
		}
	}
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perOp*1e3*float64(1<<20)/float64(len(src)), "ms/MiB")
}

// BenchmarkParseFile parses the file named by A2FARM_BENCH_PYFILE (a large
// real module gives the representative ms/MiB figure); skipped when unset.
func BenchmarkParseFile(b *testing.B) {
	path := os.Getenv("A2FARM_BENCH_PYFILE")
	if path == "" {
		b.Skip("set A2FARM_BENCH_PYFILE to a Python file")
	}
	src, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	benchmarkParse(b, "bench/module.py", src)
}

// BenchmarkParseTree parses every .py file under A2FARM_BENCH_PYDIR (e.g.
// a `git archive` of a real repository) per iteration; skipped when unset.
func BenchmarkParseTree(b *testing.B) {
	root := os.Getenv("A2FARM_BENCH_PYDIR")
	if root == "" {
		b.Skip("set A2FARM_BENCH_PYDIR to a folder of Python files")
	}
	type file struct {
		path string
		src  []byte
	}
	var files []file
	var total int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".py") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, file{path, src})
		total += int64(len(src))
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	p := newTestParser(b)
	b.SetBytes(total)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, f := range files {
			if _, err := p.Parse(f.path, f.src); err != nil {
				b.Fatal(err)
			}
		}
	}
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perOp*1e3*float64(1<<20)/float64(total), "ms/MiB")
	b.ReportMetric(float64(len(files)), "files")
}

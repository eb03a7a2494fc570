package codegraph_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// edges lists "src -type-> dst" for every edge of the given type leaving
// src (duplicates kept).
func edges(g *codegraph.Graph, src string, t codegraph.EdgeType) []string {
	n, ok := g.Lookup(src)
	if !ok {
		return []string{"<no node " + src + ">"}
	}
	var out []string
	for _, e := range g.Out(n) {
		if e.Type == t {
			out = append(out, g.Nodes[e.Dst].ID)
		}
	}
	slices.Sort(out)
	return out
}

func same(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func TestGraphGolden(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}), graphtest.Files)
	var buf bytes.Buffer
	if err := g.WriteJSONLines(&buf); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "fixture_graph.golden.jsonl", buf.Bytes())
}

func TestGraphNodes(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}), graphtest.Files)
	for _, id := range []string{"/", "pkg", "pkg/util", "tests", "setup.py", "pkg/core.py:Engine", "pkg/core.py:Engine.run",
		"pkg/core.py:Engine.stop.inner", "pkg/broken.py", "pkg/py2.py"} {
		if _, ok := g.Lookup(id); !ok {
			t.Errorf("node %s missing", id)
		}
	}
	for _, id := range []string{"docs", ".github", ".github/scripts/ci.py", "pkg/core.py:Engine.__init__", "pkg/core.py:Engine.__init__.hidden"} {
		if _, ok := g.Lookup(id); ok {
			t.Errorf("node %s exists; want it absent", id)
		}
	}
	n, _ := g.Lookup("pkg/core.py:Engine.run")
	if node := g.Node(n); node.Type != codegraph.Function || node.StartLine != 19 || node.EndLine != 20 {
		t.Errorf("Engine.run = %+v", node)
	}
	if code := g.Code(n); code != "async def run(self):\n        return slug(self.name)" {
		t.Errorf("code of Engine.run = %q", code)
	}
}

func TestGraphContains(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}), graphtest.Files)
	same(t, "/ contains", edges(g, "/", codegraph.Contains), "app.py", "setup.py", "pkg", "tests")
	same(t, "pkg contains", edges(g, "pkg", codegraph.Contains), "pkg/__init__.py", "pkg/base.py", "pkg/core.py", "pkg/util")
	same(t, "core.py contains", edges(g, "pkg/core.py", codegraph.Contains), "pkg/core.py:Engine", "pkg/core.py:build", "pkg/core.py:orphan")
	same(t, "Engine contains", edges(g, "pkg/core.py:Engine", codegraph.Contains), "pkg/core.py:Engine.run", "pkg/core.py:Engine.stop")
	same(t, "stop contains", edges(g, "pkg/core.py:Engine.stop", codegraph.Contains), "pkg/core.py:Engine.stop.inner")
	// Files Python cannot parse keep their node but are not contained.
	for _, f := range []string{"pkg/broken.py", "pkg/py2.py"} {
		n, _ := g.Lookup(f)
		if in := g.In(n); len(in) != 0 {
			t.Errorf("%s has %d incoming edges; want none", f, len(in))
		}
	}
}

func TestGraphImports(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}), graphtest.Files)
	// Every import statement anywhere in the file, once per resolved name.
	same(t, "core.py imports", edges(g, "pkg/core.py", codegraph.Imports),
		"pkg/util/helpers.py",      // import pkg.util.helpers
		"pkg/util/helpers.py",      // from pkg.util import helpers (a submodule)
		"pkg/util/helpers.py:slug", // from pkg.util.helpers import slug (a node)
		"pkg/util/helpers.py",      // ... missing_name (no such node: the module)
		"pkg/base.py",              // from . import base as b (relative)
		"pkg/base.py",              // from .base import * (the module)
		"pkg/util/helpers.py:slug", // the import inside Engine.__init__ counts too
	)
	// A class gets the imports directly in its body and in its __init__.
	same(t, "Engine imports", edges(g, "pkg/core.py:Engine", codegraph.Imports), "pkg/util/helpers.py:slug")
	same(t, "__init__.py imports", edges(g, "pkg/__init__.py", codegraph.Imports), "pkg/core.py:Engine", "pkg/util/helpers.py")
	same(t, "stop imports (stdlib only)", edges(g, "pkg/core.py:Engine.stop", codegraph.Imports))
}

func TestGraphInvokesAndInherits(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}), graphtest.Files)
	tests := []struct {
		src  string
		t    codegraph.EdgeType
		want []string
	}{
		// a class invokes what its __init__ calls, nested functions included
		{"pkg/core.py:Engine", codegraph.Invokes, []string{"pkg/core.py:build"}},
		// bases: b.Base -> Base through the imported module; Generic[T] is ignored
		{"pkg/core.py:Engine", codegraph.Inherits, []string{"pkg/base.py:Base", "pkg/base.py:Mixin"}},
		// an imported name
		{"pkg/core.py:Engine.run", codegraph.Invokes, []string{"pkg/util/helpers.py:slug"}},
		// a method of a class inside an imported module; a nested function of
		// its own scope; calls inside the nested function do not count
		{"pkg/core.py:Engine.stop", codegraph.Invokes, []string{"pkg/base.py:Base.cleanup", "pkg/core.py:Engine.stop.inner"}},
		{"pkg/core.py:Engine.stop.inner", codegraph.Invokes, []string{"pkg/util/helpers.py:deep_call"}},
		// a sibling in the file
		{"pkg/core.py:build", codegraph.Invokes, []string{"pkg/core.py:Engine"}},
		// nothing matches anywhere
		{"pkg/core.py:orphan", codegraph.Invokes, nil},
		// re-exported through pkg/__init__.py, members of re-exported classes,
		// and an alias
		{"app.py:main", codegraph.Invokes, []string{"pkg/core.py:Engine", "pkg/core.py:Engine.stop", "pkg/util/helpers.py:slug", "pkg/util/helpers.py:deep_call"}},
		// the global fallback: no scope knows "cleanup" here, every node named so matches
		{"app.py:fallback", codegraph.Invokes, []string{"pkg/base.py:Base.cleanup"}},
	}
	for _, tt := range tests {
		same(t, fmt.Sprintf("%s %s", tt.src, tt.t), edges(g, tt.src, tt.t), tt.want...)
	}
}

func TestIsTestID(t *testing.T) {
	for id, want := range map[string]bool{
		"tests/test_core.py":        true,
		"pkg/test_x.py:f":           true,
		"testing/util.py":           true,
		"pkg/foo_test.py":           true,
		"pkg/Tests/x.py":            true,
		"pytest/x.py":               false,
		"latest/x.py":               false,
		"pkg/core.py:test_function": false, // only the file part counts
	} {
		if got := codegraph.IsTestID(id); got != want {
			t.Errorf("IsTestID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestNodeAndEdgeTypeNames(t *testing.T) {
	for _, name := range []string{"directory", "file", "class", "function"} {
		if nt, ok := codegraph.ParseNodeType(name); !ok || nt.String() != name {
			t.Errorf("node type %q round trip failed", name)
		}
	}
	for _, name := range []string{"contains", "imports", "invokes", "inherits"} {
		if et, ok := codegraph.ParseEdgeType(name); !ok || et.String() != name {
			t.Errorf("edge type %q round trip failed", name)
		}
	}
	if _, ok := codegraph.ParseEdgeType("calls"); ok {
		t.Error("ParseEdgeType accepted an unknown type")
	}
	if !strings.HasPrefix(codegraph.NodeType(9).String(), "NodeType(") {
		t.Error("unknown node type has no fallback name")
	}
}

// TestSnapshotSkipsLinksAndUndecodableFiles: a symlink (which could point
// outside the repository) and a file that is not UTF-8 are left out.
func TestSnapshotSkipsLinksAndUndecodableFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "o__r")
	r, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	commit, err := r.Commit("", repogen.Change{Message: "m",
		Write:    map[string]string{"pkg/ok.py": "x = 1\n", "pkg/latin1.py": "s = '\xe9t\xe9'\n"},
		Symlinks: map[string]string{"pkg/link.py": "../../../etc/passwd"}})
	if err != nil {
		t.Fatal(err)
	}
	src := graphtest.Snapshot(t, lang.NewSet(python.Language{}), dir, commit)
	var paths []string
	for _, f := range src.Files {
		paths = append(paths, f.Path)
	}
	if !slices.Equal(paths, []string{"pkg/ok.py"}) || !slices.Equal(src.Skipped, []string{"pkg/latin1.py"}) {
		t.Errorf("files %q, skipped %q; want only pkg/ok.py, with pkg/latin1.py skipped", paths, src.Skipped)
	}
}

// TestParseSnapshotMatchesLoadThenParse: parsing each file as it is read
// gives what reading everything, then parsing, gives — same files, same
// order, same parse results, same skipped files.
func TestParseSnapshotMatchesLoadThenParse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "o__r")
	r, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"pkg/latin1.py": "s = '\xe9t\xe9'\n"}
	for k, v := range graphtest.Files {
		files[k] = v
	}
	commit, err := r.Commit("", repogen.Change{Message: "m", Write: files})
	if err != nil {
		t.Fatal(err)
	}
	l := lang.NewSet(python.Language{})
	want := graphtest.Snapshot(t, l, dir, commit)
	wantParsed, err := codegraph.ParseAll(context.Background(), l, want.Files)
	if err != nil {
		t.Fatal(err)
	}
	got, parsed, err := codegraph.ParseSnapshot(context.Background(), l, "o/r", graphtest.At(t, dir, commit))
	if err != nil {
		t.Fatal(err)
	}
	got.ReadTime, want.ReadTime = 0, 0
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(parsed, wantParsed) {
		t.Errorf("ParseSnapshot differs from LoadSnapshot then ParseAll: %d files (%v skipped) against %d (%v)",
			len(got.Files), got.Skipped, len(want.Files), want.Skipped)
	}
	if len(want.Skipped) != 1 {
		t.Errorf("skipped %v, want the latin-1 file", want.Skipped)
	}
}

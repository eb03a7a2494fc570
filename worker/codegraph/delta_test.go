package codegraph_test

import (
	"bytes"
	"maps"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// deltaChain is a repository's history in steps: each step edits the
// previous files (nil deletes a file).
var deltaChain = []struct {
	name  string
	files map[string]*string
}{
	{"base", map[string]*string{
		"pkg/__init__.py":    ptr("from .util import helper\n"),
		"pkg/util.py":        ptr("def helper(x):\n    return x + 1\n\n\ndef other():\n    return helper(2)\n"),
		"pkg/core.py":        ptr("from pkg.util import helper\n\n\nclass Engine:\n    def run(self):\n        return helper(1)\n\n    def stop(self):\n        return self.run()\n"),
		"pkg/io.py":          ptr("import pkg.core\n\n\ndef load():\n    return pkg.core.Engine().run()\n"),
		"tests/test_core.py": ptr("from pkg.core import Engine\n\n\ndef test_run():\n    assert Engine().run() == 2\n"),
	}},
	{"a line added at the top shifts every definition below", map[string]*string{
		"pkg/util.py": ptr("# utilities\ndef helper(x):\n    return x + 1\n\n\ndef other():\n    return helper(2)\n"),
	}},
	{"a file added and one deleted", map[string]*string{
		"pkg/extra.py": ptr("from pkg.util import other\n\n\ndef extra():\n    return other()\n"),
		"pkg/io.py":    nil,
	}},
	{"a file renamed (deleted and added with the same content)", map[string]*string{
		"pkg/extra.py":  nil,
		"pkg/plugin.py": ptr("from pkg.util import other\n\n\ndef extra():\n    return other()\n"),
	}},
	{"a function moved to another module, its callers now resolve there", map[string]*string{
		"pkg/util.py":     ptr("# utilities\ndef other():\n    return 3\n"),
		"pkg/helpers.py":  ptr("def helper(x):\n    return x + 1\n"),
		"pkg/core.py":     ptr("from pkg.helpers import helper\n\n\nclass Engine:\n    def run(self):\n        return helper(1)\n\n    def stop(self):\n        return self.run()\n"),
		"pkg/__init__.py": ptr("from .helpers import helper\n"),
	}},
	{"a method added in the middle of a class", map[string]*string{
		"pkg/core.py": ptr("from pkg.helpers import helper\n\n\nclass Engine:\n    def start(self):\n        return self.stop()\n\n    def run(self):\n        return helper(1)\n\n    def stop(self):\n        return self.run()\n"),
	}},
	{"a new folder", map[string]*string{
		"pkg/sub/__init__.py": ptr(""),
		"pkg/sub/deep.py":     ptr("from pkg.core import Engine\n\n\nclass Turbo(Engine):\n    def run(self):\n        return super().run() * 2\n"),
	}},
}

func ptr(s string) *string { return &s }

// TestAGraphDeltaGivesTheFreshGraph: at every step of a chain of commits
// — definitions shifted, files added, deleted and renamed, a function
// moved so that its callers resolve elsewhere, a class growing, a folder
// added — the previous step's graph plus the delta is the step's fresh
// graph, record for record (files, nodes, edges, in order), whether the
// base is the built graph or one read back from disk.
func TestAGraphDeltaGivesTheFreshGraph(t *testing.T) {
	l := lang.NewSet(python.Language{})
	files := map[string]string{}
	var prev *codegraph.Graph
	for _, step := range deltaChain {
		for p, c := range step.files {
			if c == nil {
				delete(files, p)
			} else {
				files[p] = *c
			}
		}
		g := graphtest.Build(t, l, maps.Clone(files))
		if prev != nil {
			var want, delta bytes.Buffer
			if err := g.WriteBinary(&want); err != nil {
				t.Fatal(err)
			}
			if err := g.WriteDelta(prev, &delta); err != nil {
				t.Fatal(err)
			}
			var baseBin bytes.Buffer
			if err := prev.WriteBinary(&baseBin); err != nil {
				t.Fatal(err)
			}
			stored, err := codegraph.ReadGraph(baseBin.Bytes(), l, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, base := range []*codegraph.Graph{prev, stored} {
				got, err := codegraph.ReadGraphDelta(base, delta.Bytes(), l, nil)
				if err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				var gotBin bytes.Buffer
				if err := got.WriteBinary(&gotBin); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(gotBin.Bytes(), want.Bytes()) {
					t.Errorf("%s: base + delta is not the fresh graph (%d nodes, %d edges; fresh %d, %d)",
						step.name, len(got.Nodes), len(got.Edges), len(g.Nodes), len(g.Edges))
				}
			}
			t.Logf("%s: graph %d bytes, delta %d bytes", step.name, want.Len(), delta.Len())
			if len(g.Nodes) != len(prev.Nodes) {
				if _, err := codegraph.ReadGraphDelta(g, delta.Bytes(), l, nil); err == nil {
					t.Errorf("%s: the delta was applied to another base", step.name)
				}
			}
		}
		prev = g
	}
}

// TestADamagedGraphDeltaIsRefused: a delta cut short, or one whose script
// reads past its base, is an error, not a graph.
func TestADamagedGraphDeltaIsRefused(t *testing.T) {
	l := lang.NewSet(python.Language{})
	base := graphtest.Build(t, l, map[string]string{"a.py": "def f():\n    return 1\n"})
	next := graphtest.Build(t, l, map[string]string{"a.py": "def f():\n    return 1\n", "b.py": "from a import f\n\n\ndef g():\n    return f()\n"})
	var delta bytes.Buffer
	if err := next.WriteDelta(base, &delta); err != nil {
		t.Fatal(err)
	}
	for cut := len("a2farm-graph-delta 1\n"); cut < delta.Len(); cut += 7 {
		if _, err := codegraph.ReadGraphDelta(base, delta.Bytes()[:cut], l, nil); err == nil {
			t.Errorf("a delta cut at %d of %d bytes was read", cut, delta.Len())
		}
	}
	if _, err := codegraph.ReadGraphDelta(base, []byte("a2farm-graph 1\n"), l, nil); err == nil {
		t.Error("a whole graph was read as a delta")
	}
}

// Package graphtest builds code graphs of generated repositories for
// tests: a fixture package and the steps the CLI takes (git objects ->
// snapshot -> parse -> graph).
package graphtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
)

// Build commits files into a fresh repository and builds the graph of
// that commit the way the CLI does (git objects -> snapshot -> graph).
func Build(t testing.TB, l *lang.Set, files map[string]string) *codegraph.Graph {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "o__r")
	r, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	commit, err := r.Commit("", repogen.Change{Message: "fixture", Write: files})
	if err != nil {
		t.Fatal(err)
	}
	src := Snapshot(t, l, dir, commit)
	parsed, err := codegraph.ParseAll(context.Background(), l, src.Files)
	if err != nil {
		t.Fatal(err)
	}
	return codegraph.BuildGraph(l, src, parsed)
}

// Snapshot reads the sources of a commit of the repository at dir.
func Snapshot(t testing.TB, l *lang.Set, dir, commit string) *codegraph.Snapshot {
	t.Helper()
	src, err := codegraph.LoadSnapshot(context.Background(), l, "o/r", At(t, dir, commit))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// At opens the repository at dir at a commit; the repository closes with
// the test.
func At(t testing.TB, dir, commit string) *gitrepo.Snapshot {
	t.Helper()
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	snap, err := repo.At(commit)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// Files is a small Python package that exercises every kind of node and
// edge: relative and absolute imports, re-exports through __init__.py, a
// hidden __init__, nested functions, a file tree-sitter must recover from
// and files the graph skips.
var Files = map[string]string{
	"setup.py":              "from setuptools import setup\nsetup(name='pkg')\n",
	"docs/conf.txt":         "not python\n",
	".github/scripts/ci.py": "print('skipped')\n",
	"pkg/__init__.py":       "from .core import Engine\nfrom .util import helpers as h\n",
	"pkg/core.py": `import os
import pkg.util.helpers
from pkg.util import helpers
from pkg.util.helpers import slug, missing_name
from . import base as b
from .base import *


class Engine(b.Base, Mixin, Generic[T]):
    import json

    def __init__(self):
        from .util.helpers import slug as s
        self.x = build()

        def hidden():
            return 1

    async def run(self):
        return slug(self.name)

    def stop(self):
        from os import path
        cleanup()

        def inner():
            return deep_call()

        return inner()


def build():
    return Engine()


def orphan():
    return nothing_like_this()
`,
	"pkg/base.py": `class Base:
    def cleanup(self):
        pass


class Mixin:
    pass
`,
	"pkg/util/__init__.py": "",
	"pkg/util/helpers.py": `def slug(x):
    return x


def deep_call():
    return 0
`,
	"pkg/broken.py":      "def f(:\n    pass\n",
	"pkg/py2.py":         "print 'hi'\n",
	"tests/test_core.py": "from pkg.core import Engine\n\n\ndef test_run():\n    Engine().run()\n",
	"app.py": `from pkg import Engine
from pkg.util.helpers import deep_call as dc


def main():
    return Engine().stop() or h.slug(1) or dc()


def fallback(x):
    return x.cleanup()
`,
}

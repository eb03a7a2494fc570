package repoindex

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// chain is a repository's history: each step edits the previous files
// (an empty content deletes a file).
var chain = []struct {
	name  string
	files map[string]string
}{
	{"a line added at the top of a module shifts everything below it", map[string]string{
		"pkg/base.py": "# the base classes\n" + graphtest.Files["pkg/base.py"]}},
	{"a file added, one deleted", map[string]string{
		"pkg/extra.py": "from pkg.base import Base\n\n\nclass Extra(Base):\n    def helper(self):\n        return 'extra helper'\n",
		"pkg/py2.py":   ""}},
	{"a file renamed", map[string]string{
		"pkg/extra.py":  "",
		"pkg/plugin.py": "from pkg.base import Base\n\n\nclass Extra(Base):\n    def helper(self):\n        return 'extra helper'\n"}},
	{"a function moved to another module, so its callers resolve there", map[string]string{
		"pkg/moved.py":  "def slug(text):\n    return text.lower().replace(' ', '-')\n",
		"pkg/plugin.py": "from pkg.base import Base\nfrom pkg.moved import slug\n\n\nclass Extra(Base):\n    def helper(self):\n        return slug('extra helper')\n"}},
	{"a new folder, a class growing a method, cleanup text everywhere", map[string]string{
		"pkg/sub/__init__.py": "# a package\n",
		"pkg/sub/deep.py":     "from pkg.plugin import Extra\n\n\nclass Turbo(Extra):\n    def cleanup(self):\n        '''cleanup cleanup engine run'''\n        return self.helper()\n"}},
}

// TestAnOverlayEntryAnswersAsAFreshBuild: along a chain of commits — lines
// shifted, files added, deleted and renamed, a function moved so that
// imports and calls resolve elsewhere, a folder added — each commit after
// the first is stored as an overlay on the first, and opened it answers as
// an index built for that commit alone in an empty cache: the graph, every
// node's code and skeleton, the chunks and their texts, both engines'
// hits and scores, node search, summaries and history. An overlay reads
// from git only the files its base lacks; with the parse results gone, the
// others are parsed again from the base's sources.
func TestAnOverlayEntryAnswersAsAFreshBuild(t *testing.T) {
	reposDir := t.TempDir()
	r, err := repogen.Init(filepath.Join(reposDir, "o__r"))
	if err != nil {
		t.Fatal(err)
	}
	files := maps.Clone(graphtest.Files)
	commit, err := r.Commit("", repogen.Change{Message: "base", Write: files})
	if err != nil {
		t.Fatal(err)
	}
	commits := []string{commit}
	for _, step := range chain {
		change := repogen.Change{Message: step.name, Write: map[string]string{}}
		for p, c := range step.files {
			if c == "" {
				change.Delete = append(change.Delete, p)
			} else {
				change.Write[p] = c
			}
		}
		if commit, err = r.Commit(commit, change); err != nil {
			t.Fatal(err)
		}
		commits = append(commits, commit)
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	ctx := context.Background()
	l := lang.NewSet(python.Language{})
	shared, err := OpenCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, commit := range commits {
		label := "base"
		if i > 0 {
			label = chain[i-1].name
		}
		if i == 3 { // parse results gone: the files the base has are parsed again from its sources
			if err := os.RemoveAll(filepath.Join(shared.root, "parse")); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Build(ctx, repos, "o/r", commit, BuildOptions{Languages: l, Cache: shared})
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		got.Close()
		// Opened again, as every later user opens it.
		if got, err = Build(ctx, repos, "o/r", commit, BuildOptions{Languages: l, Cache: shared}); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		meta, err := readMeta(shared.snapshotDir("o/r", commit))
		if err != nil {
			t.Fatal(err)
		}
		if wantBase := map[bool]string{true: "", false: commits[0]}[i == 0]; meta.Base != wantBase {
			t.Errorf("%s: stored on base %q, want %q", label, meta.Base, wantBase)
		}
		fresh, err := OpenCache(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Build(ctx, repos, "o/r", commit, BuildOptions{Languages: l, Cache: fresh})
		if err != nil {
			t.Fatal(err)
		}
		sameAnswers(t, label, got, want)
		if !reflect.DeepEqual(got.Commits.Commits, want.Commits.Commits) {
			t.Errorf("%s: history differs", label)
		}
		got.Close()
		want.Close()
	}
}

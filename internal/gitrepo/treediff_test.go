package gitrepo

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/a2farm/a2farm/internal/repogen"
)

// TestChangedFilesMatchDiffTree compares the raw-tree diff with go-git's
// object.DiffTree (what history used before) on commits that add, modify
// and delete files at several depths, change only a file's mode, replace a
// file by a folder and a folder by a file, add a symlink, and on a root
// commit.
func TestChangedFilesMatchDiffTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "o__r")
	gen, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	changes := []repogen.Change{
		{Write: map[string]string{"a.py": "1", "pkg/b.py": "2", "pkg/sub/c.py": "3", "pkg/sub/deep/d.py": "4", "z": "5"}},
		{Write: map[string]string{"pkg/sub/deep/d.py": "4b", "pkg/new.py": "n"}},
		{Delete: []string{"pkg/sub/c.py"}, Write: map[string]string{"pkg/sub-x.py": "dash sorts before slash"}},
		{Executable: []string{"a.py"}},
		{Delete: []string{"z"}, Write: map[string]string{"z/inner.py": "file became a folder"}},
		{Delete: []string{"pkg/sub/deep/d.py"}, Write: map[string]string{"pkg/sub/deep": "folder became a file"}},
		{Symlinks: map[string]string{"link": "a.py"}, Write: map[string]string{"pkg.py": "next to pkg/"}},
		{Write: map[string]string{"a.py": "1"}}, // back to a plain file: a mode change the other way
		{},                                      // the same tree: nothing changed
	}
	var ids []string
	parent := ""
	for i, ch := range changes {
		ch.Message = "change"
		id, err := gen.Commit(parent, ch)
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		ids = append(ids, id)
		parent = id
	}
	repo, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	var pairs []TreePair
	var want [][]string
	for i := len(ids) - 1; i >= 0; i-- { // newest first, as a walk goes
		c, err := repo.repo.CommitObject(plumbing.NewHash(ids[i]))
		if err != nil {
			t.Fatal(err)
		}
		tree, _ := c.Tree()
		pair := TreePair{Tree: c.TreeHash.String()}
		var parentTree *object.Tree
		if c.NumParents() == 1 {
			p, _ := c.Parent(0)
			parentTree, _ = p.Tree()
			pair.Parent = p.TreeHash.String()
		}
		changes, err := object.DiffTree(parentTree, tree)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ch := range changes {
			name := ch.To.Name
			if name == "" {
				name = ch.From.Name
			}
			names = append(names, name)
		}
		slices.Sort(names)
		pairs = append(pairs, pair)
		want = append(want, slices.Compact(names))
	}
	got, err := repo.ChangedFiles(context.Background(), pairs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("commit %d from the newest: changed files %q, DiffTree says %q", i, got[i], want[i])
		}
	}
	if len(want[len(want)-1]) != 5 || len(want[len(want)-4]) != 1 || len(want[1]) != 1 || len(want[0]) != 0 {
		t.Errorf("fixture drifted: root %q, mode changes %q %q, no-op %q", want[len(want)-1], want[len(want)-4], want[1], want[0])
	}
}

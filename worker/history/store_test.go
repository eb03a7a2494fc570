package history

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/repogen"
)

// fixture is a repository with a main line, a side branch merged back,
// commits whose committer times tie (so the walk order's tie-breaking
// shows), a second root merged in, and commits after the ones tested as
// bases.
type fixture struct {
	dir  string
	repo *gitrepo.Repo
	// ids by name.
	ids map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "o__r")
	gen, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	at := func(min int) time.Time { return time.Date(2024, 1, 1, 0, min, 0, 0, time.UTC) }
	commit := func(name string, parents []string, when time.Time, files map[string]string) {
		t.Helper()
		var ps []string
		for _, p := range parents {
			ps = append(ps, ids[p])
		}
		id, err := gen.Merge(ps, repogen.Change{Message: name + "\n\nfixes #" + name, Write: files, When: when})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	commit("root", nil, at(0), map[string]string{"a.py": "0"})
	commit("m1", []string{"root"}, at(1), map[string]string{"a.py": "1"})
	commit("s1", []string{"m1"}, at(2), map[string]string{"side/s.py": "1"})
	commit("m2", []string{"m1"}, at(2), map[string]string{"b.py": "2"}) // ties with s1
	commit("s2", []string{"s1"}, at(3), map[string]string{"side/s.py": "2"})
	commit("m3", []string{"m2"}, at(3), map[string]string{"c.py": "3"}) // ties with s2
	commit("merge", []string{"m3", "s2"}, at(4), nil)
	commit("other", nil, at(1), map[string]string{"o.py": "o"}) // a second root
	commit("join", []string{"merge", "other"}, at(5), nil)
	commit("m4", []string{"join"}, at(6), map[string]string{"d/e.py": "4"})
	commit("late", []string{"m4"}, at(7), map[string]string{"late.py": "after the bases"})
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	return &fixture{dir: dir, repo: repo, ids: ids}
}

// gitWalk is what history read before the store: go-git's walk by
// committer time and object.DiffTree's changed files (none for merges).
func (f *fixture) gitWalk(t *testing.T, base string, limit int) []Commit {
	t.Helper()
	r, err := git.PlainOpen(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	iter, err := r.Log(&git.LogOptions{From: plumbing.NewHash(base), Order: git.LogOrderCommitterTime})
	if err != nil {
		t.Fatal(err)
	}
	var out []Commit
	for len(out) < limit {
		c, err := iter.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		if c.NumParents() <= 1 {
			tree, _ := c.Tree()
			var parentTree *object.Tree
			if c.NumParents() == 1 {
				p, _ := c.Parent(0)
				parentTree, _ = p.Tree()
			}
			changes, err := object.DiffTree(parentTree, tree)
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range changes {
				name := ch.To.Name
				if name == "" { // deleted
					name = ch.From.Name
				}
				files = append(files, name)
			}
			slices.Sort(files)
		}
		out = append(out, Commit{SHA: c.Hash.String(), Files: files})
	}
	return out
}

func sameWalk(t *testing.T, label string, got, want []Commit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d commits, want %d", label, len(got), len(want))
	}
	for i := range want {
		if got[i].SHA != want[i].SHA || !slices.Equal(got[i].Files, want[i].Files) {
			t.Errorf("%s: commit %d is %s %q, want %s %q", label, i, got[i].SHA[:8], got[i].Files, want[i].SHA[:8], want[i].Files)
		}
	}
}

// TestViewIsTheSnapshotsGitLog: for every base and limit, a view equals
// go-git's walk by committer time (ties included) with DiffTree's files;
// it holds the base's ancestors only, never a later commit, even when the
// store holds later ones; merges list no files.
func TestViewIsTheSnapshotsGitLog(t *testing.T) {
	f := newFixture(t)
	store, err := OpenStore(filepath.Join(t.TempDir(), "o__r.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The newest first, so the later views are derived from stored records.
	for _, base := range []string{"late", "m4", "join", "merge", "m3", "s2", "m2", "root", "other"} {
		for _, limit := range []int{1, 3, 7, MaxCommits} {
			got, _, err := store.View(ctx, f.repo, f.ids[base], limit)
			if err != nil {
				t.Fatal(err)
			}
			sameWalk(t, base, got, f.gitWalk(t, f.ids[base], limit))
			for _, c := range got {
				if base != "late" && c.SHA == f.ids["late"] {
					t.Errorf("the view of %s holds a later commit", base)
				}
			}
		}
	}
	got, st, err := store.View(ctx, f.repo, f.ids["merge"], MaxCommits)
	if err != nil {
		t.Fatal(err)
	}
	if st.FromGit != 0 || st.Diffed != 0 {
		t.Errorf("a stored history read %d commits from git and diffed %d", st.FromGit, st.Diffed)
	}
	if got[0].SHA != f.ids["merge"] || got[0].Files != nil {
		t.Errorf("the merge %s lists files %q", got[0].SHA[:8], got[0].Files)
	}
	if got[0].Subject != "merge" || got[0].Message != "merge\n\nfixes #merge" || got[0].Date != "2024-01-01T00:04:00+00:00" {
		t.Errorf("merge record: %+v", got[0])
	}
	if n := len(got); n != 7 {
		t.Errorf("merge has %d ancestors with itself, want 7", n)
	}
}

// TestViewOfABaseOlderThanEverythingStored: a store that holds only the
// newest commits still derives an old base's full history, from git.
func TestViewOfABaseOlderThanEverythingStored(t *testing.T) {
	f := newFixture(t)
	store, _ := OpenStore("")
	ctx := context.Background()
	if _, _, err := store.View(ctx, f.repo, f.ids["late"], 2); err != nil {
		t.Fatal(err)
	}
	got, st, err := store.View(ctx, f.repo, f.ids["m2"], MaxCommits)
	if err != nil {
		t.Fatal(err)
	}
	sameWalk(t, "m2", got, f.gitWalk(t, f.ids["m2"], MaxCommits))
	if st.FromGit == 0 || st.Diffed != 3 {
		t.Errorf("an unstored base: %d commits from git, %d diffed; want some and 3", st.FromGit, st.Diffed)
	}
}

// TestAHistoryStoredByAnotherWorker: one worker's store, exported (as the
// farm's shared store carries it) and imported by another, serves the
// other's views without git; two processes saving to one log keep both
// their records; a torn record at the end of a log is ignored.
func TestAHistoryStoredByAnotherWorker(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	first, _ := OpenStore(filepath.Join(dir, "first.log"))
	want, _, err := first.View(ctx, f.repo, f.ids["late"], MaxCommits)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Save(); err != nil {
		t.Fatal(err)
	}
	var shared bytes.Buffer
	if err := first.Export(&shared); err != nil {
		t.Fatal(err)
	}
	second, _ := OpenStore(filepath.Join(dir, "second.log"))
	if n, err := second.Import(&shared); err != nil || n != first.Len() {
		t.Fatalf("import took %d records (%v), want %d", n, err, first.Len())
	}
	got, st, err := second.View(ctx, f.repo, f.ids["late"], MaxCommits)
	if err != nil {
		t.Fatal(err)
	}
	sameWalk(t, "imported", got, want)
	if st.FromGit != 0 || st.Diffed != 0 {
		t.Errorf("an imported history read %d commits from git and diffed %d", st.FromGit, st.Diffed)
	}

	// Two processes append to one log; each keeps the other's records.
	path := filepath.Join(dir, "shared.log")
	a, _ := OpenStore(path)
	b, _ := OpenStore(path)
	if _, _, err := a.View(ctx, f.repo, f.ids["m3"], MaxCommits); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.View(ctx, f.repo, f.ids["other"], MaxCommits); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if !b.Has(f.ids["m3"]) {
		t.Error("saving did not take in the records the other process appended")
	}
	// A torn record at the end (a crash mid-append) is dropped on open.
	fh, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	fh.Write([]byte{200, 0, 0, 0, 1, 2, 3})
	fh.Close()
	c, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"m3", "m2", "root", "other"} {
		if !c.Has(f.ids[name]) {
			t.Errorf("the reopened log lacks %s", name)
		}
	}
	got, st, err = c.View(ctx, f.repo, f.ids["m3"], MaxCommits)
	if err != nil {
		t.Fatal(err)
	}
	sameWalk(t, "reopened", got, f.gitWalk(t, f.ids["m3"], MaxCommits))
	if st.FromGit != 0 || st.Diffed != 0 {
		t.Errorf("a saved history read %d commits from git and diffed %d", st.FromGit, st.Diffed)
	}
}

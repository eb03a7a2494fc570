package gitrepo

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/a2farm/a2farm/internal/needs"
	"github.com/a2farm/a2farm/internal/repogen"
)

// TestAPatchedSnapshotIsTheCommitGitWouldMake: a base commit and a "bug"
// commit on it (a function changed, a file without a final newline
// changed, a file deleted with its folder, a file added in new folders, a
// file renamed and changed, an executable changed); git diff writes the
// patch, and Patched(base, patch) must write a commit whose tree is the
// bug commit's tree — the same id, so byte for byte the same snapshot —
// with base as its parent, the same id every time, readable after the
// repository is opened again, and told patched from its record.
func TestAPatchedSnapshotIsTheCommitGitWouldMake(t *testing.T) {
	needs.Program(t, "git", "apt-get install git", "git")
	dir := filepath.Join(t.TempDir(), "o__r")
	g, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	base, err := g.Commit("", repogen.Change{Message: "base", Executable: []string{"run.sh"}, Write: map[string]string{
		"pkg/a.py":    "def f():\n    return 1\n\n\ndef g():\n    return 2\n",
		"pkg/b.py":    "x = 1\ny = 2",
		"docs/old.md": "old\n",
		"lib/keep.py": "k = 1\nkk = 2\nkkk = 3\nkkkk = 4\n",
		"run.sh":      "#!/bin/sh\necho hi\n",
	}})
	if err != nil {
		t.Fatal(err)
	}
	bug, err := g.Commit(base, repogen.Change{Message: "bug", Delete: []string{"docs/old.md", "lib/keep.py"}, Executable: []string{"run.sh"}, Write: map[string]string{
		"run.sh":        "#!/bin/sh\necho bye\n",
		"pkg/a.py":      "def f():\n    return 0\n\n\ndef g():\n    return 2\n",
		"pkg/b.py":      "x = 1\ny = 3",
		"new/deep/c.py": "c = 1\n",
		"lib2/keep.py":  "k = 1\nkk = 2\nkkk = 3\nkkkk = 5\n",
	}})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := exec.Command("git", "--git-dir", dir, "diff", "-M", "--no-color", base, bug).Output()
	if err != nil {
		t.Fatalf("git diff: %v", err)
	}
	if !strings.Contains(string(patch), "rename from lib/keep.py") || !strings.Contains(string(patch), `\ No newline at end of file`) {
		t.Fatalf("the patch lacks the rename or the missing newline the test is about:\n%s", patch)
	}

	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.Patched(base, string(patch), "o__r.bug")
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.Patched(base, string(patch), "o__r.bug")
	if err != nil || again != id {
		t.Errorf("written again: %s, %v; want the same commit %s", again, err, id)
	}
	r.Close()

	r, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.repo.CommitObject(plumbing.NewHash(id))
	if err != nil {
		t.Fatalf("the patched commit is not in the repository once it is opened again: %v", err)
	}
	want, err := r.repo.CommitObject(plumbing.NewHash(bug))
	if err != nil {
		t.Fatal(err)
	}
	if got.TreeHash != want.TreeHash {
		t.Errorf("patched tree %s, the bug commit's %s", got.TreeHash, want.TreeHash)
	}
	if len(got.ParentHashes) != 1 || got.ParentHashes[0].String() != base || got.Author.Email != PatchedEmail {
		t.Errorf("patched commit: parents %v, author %s; want base %s and %s", got.ParentHashes, got.Author.Email, base, PatchedEmail)
	}
	snap, err := r.At(id)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := snap.ReadFile("pkg/b.py"); err != nil || string(data) != "x = 1\ny = 3" {
		t.Errorf("pkg/b.py at the patched snapshot: %q, %v", data, err)
	}

	// A history tells the patched commit from its record alone.
	if h, err := r.ReadCommit(id); err != nil || !IsPatched(h.Message, h.Parents[0]) {
		t.Errorf("the patched commit's record %+v, %v is not told patched", h, err)
	}
	if h, err := r.ReadCommit(bug); err != nil || IsPatched(h.Message, h.Parents[0]) {
		t.Errorf("the bug commit %+v, %v is told patched", h, err)
	}

	for _, bad := range []struct{ name, patch, want string }{
		{"does not apply", strings.Replace(string(patch), "-    return 1", "-    return 7", 1), "pkg/a.py: hunk #1"},
		{"a file the base lacks", "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n", "nope.py does not exist at the base commit"},
		{"no change", "just words\n", "no file changes"},
	} {
		if _, err := r.Patched(base, bad.patch, "o__r.bad"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error saying %q", bad.name, err, bad.want)
		}
	}
}

package gitrepo

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/a2farm/a2farm/internal/needs"
	"github.com/a2farm/a2farm/internal/repogen"
)

func makeRepo(t *testing.T, dir string) (first, second string) {
	t.Helper()
	r, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err = r.Commit("", repogen.Change{Message: "one", Write: map[string]string{"pkg/a.py": "x = 1\n", "README": "r\n"}})
	if err != nil {
		t.Fatal(err)
	}
	second, err = r.Commit(first, repogen.Change{Message: "two", Write: map[string]string{"pkg/a.py": "x = 2\n"}, Delete: []string{"README"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetBranch("main", second); err != nil {
		t.Fatal(err)
	}
	return first, second
}

func TestReadFileAtCommits(t *testing.T) {
	reposDir := t.TempDir()
	first, second := makeRepo(t, filepath.Join(reposDir, "o__r"))
	set := NewSet(reposDir)
	defer set.Close()

	snap, err := set.At("o/r", first[:10]) // abbreviated ids resolve
	if err != nil {
		t.Fatal(err)
	}
	if snap.Commit() != first {
		t.Errorf("commit = %s, want %s", snap.Commit(), first)
	}
	if data, err := snap.ReadFile("pkg/a.py"); err != nil || string(data) != "x = 1\n" {
		t.Errorf("pkg/a.py at first = %q, %v", data, err)
	}
	later, err := set.At("o/r", second)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := later.ReadFile("pkg/a.py"); err != nil || string(data) != "x = 2\n" {
		t.Errorf("pkg/a.py at second = %q, %v", data, err)
	}
	for _, p := range []string{"README", "pkg", "nope/x.py"} {
		if _, err := later.ReadFile(p); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadFile(%q) err = %v, want ErrNotFound", p, err)
		}
	}
	if err := set.CheckCommit(t.Context(), "o/r", "0123456789abcdef0123456789abcdef01234567"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown commit: err = %v", err)
	}
	if err := set.CheckCommit(t.Context(), "o/missing", first); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown repo: err = %v", err)
	}
}

// TestOpenWorkTreeRepository checks that a normal clone (with a work tree
// and .git folder) opens like a bare one.
func TestOpenWorkTreeRepository(t *testing.T) {
	needs.Program(t, "git", "apt-get install git", "git")
	bare := filepath.Join(t.TempDir(), "bare")
	_, second := makeRepo(t, bare)
	clone := filepath.Join(t.TempDir(), "o__r")
	if out, err := exec.Command("git", "clone", "-q", bare, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	r, err := Open(clone)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	snap, err := r.At(second)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := snap.ReadFile("pkg/a.py"); err != nil || string(data) != "x = 2\n" {
		t.Errorf("read from clone = %q, %v", data, err)
	}
}

func TestLocate(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "psf__requests.git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Locate(dir, "psf/requests"); err != nil || got != filepath.Join(dir, "psf__requests.git") {
		t.Errorf("Locate = %q, %v", got, err)
	}
	for _, bad := range []string{"requests", "a/b/c", "../x"} {
		if _, err := Locate(dir, bad); err == nil {
			t.Errorf("Locate(%q) succeeded", bad)
		}
	}
	if _, err := Open(dir); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(non-repo) err = %v", err)
	}
}

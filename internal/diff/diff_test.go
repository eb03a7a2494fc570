package diff

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/needs"
)

const twoFiles = `diff --git a/pkg/a.py b/pkg/a.py
index 1111111..2222222 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,4 +1,5 @@
 def f():
-    return 1
+    x = 1
+    return x
 
 
@@ -10 +11 @@ def g():
-    pass
+    return None
\ No newline at end of file
diff --git a/docs/new file.md b/docs/new file.md
new file mode 100644
--- /dev/null
+++ b/docs/new file.md
@@ -0,0 +1,2 @@
+# Title
+text
diff --git a/old.py b/old.py
deleted file mode 100644
--- a/old.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
`

func TestParse(t *testing.T) {
	files, err := Parse(twoFiles)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("files = %d, want 3", len(files))
	}
	a := files[0]
	if a.Path() != "pkg/a.py" || len(a.Hunks) != 2 {
		t.Fatalf("first file = %+v", a)
	}
	h := a.Hunks[0]
	wantLines := []Line{
		{Kind: Context, Text: "def f():", OldNo: 1, NewNo: 1},
		{Kind: Removed, Text: "    return 1", OldNo: 2},
		{Kind: Added, Text: "    x = 1", NewNo: 2},
		{Kind: Added, Text: "    return x", NewNo: 3},
		{Kind: Context, Text: "", OldNo: 3, NewNo: 4},
		{Kind: Context, Text: "", OldNo: 4, NewNo: 5},
	}
	if !reflect.DeepEqual(h.Lines, wantLines) {
		t.Errorf("hunk lines:\n got %+v\nwant %+v", h.Lines, wantLines)
	}
	if h2 := a.Hunks[1]; h2.OldStart != 10 || h2.OldLines != 1 || h2.NewStart != 11 || len(h2.Lines) != 2 {
		t.Errorf("second hunk = %+v (counts default to 1)", h2)
	}
	if added := files[1]; !added.Added() || added.Path() != "docs/new file.md" {
		t.Errorf("added file = %+v", added)
	}
	if del := files[2]; !del.Deleted() || del.Path() != "old.py" {
		t.Errorf("deleted file = %+v", del)
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]string{
		"hunk before header": "@@ -1 +1 @@\n-a\n+b\n",
		"truncated hunk":     "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-a\n+b\n",
		"garbage in hunk":    "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a\n?b\n",
		"bad header":         "--- a/x.py\n+++ b/x.py\n@@ -x +1 @@\n",
	}
	for name, text := range tests {
		if _, err := Parse(text); err == nil {
			t.Errorf("%s: Parse succeeded", name)
		}
	}
}

func TestApply(t *testing.T) {
	files, err := Parse(twoFiles)
	if err != nil {
		t.Fatal(err)
	}
	old := []string{"def f():", "    return 1", "", "", "", "", "", "", "def g():", "    pass"}
	got, offsets, err := Apply(old, files[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"def f():", "    x = 1", "    return x", "", "", "", "", "", "", "def g():", "    return None"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("applied:\n got %q\nwant %q", got, want)
	}
	// The second hunk says line 10 and "pass" is on line 10: no offset.
	if !reflect.DeepEqual(offsets, []int{0, 0}) {
		t.Errorf("offsets = %v, want [0 0]", offsets)
	}

	shifted := append([]string{"# a", "# b"}, old...)
	if _, offsets, err = Apply(shifted, files[0]); err != nil || !reflect.DeepEqual(offsets, []int{2, 2}) {
		t.Errorf("shifted file: offsets = %v, err = %v; want [2 2]", offsets, err)
	}

	if _, _, err := Apply([]string{"something else"}, files[0]); !errors.As(err, new(*ApplyError)) {
		t.Errorf("non-matching file: err = %v, want *ApplyError", err)
	}

	created, _, err := Apply(nil, files[1])
	if err != nil || strings.Join(created, "\n") != "# Title\ntext" {
		t.Errorf("new file = %q, err = %v", created, err)
	}
	deleted, _, err := Apply([]string{"x = 1"}, files[2])
	if err != nil || len(deleted) != 0 {
		t.Errorf("deleted file = %q, err = %v", deleted, err)
	}
}

func TestSplitLines(t *testing.T) {
	for in, want := range map[string][]string{"": nil, "a": {"a"}, "a\n": {"a"}, "a\n\nb\n": {"a", "", "b"}} {
		if got := SplitLines(in); !reflect.DeepEqual(got, want) {
			t.Errorf("SplitLines(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestApplyBytesAsGitWritesTheDiff: for each pair of contents, git diff
// --no-index writes the patch and ApplyBytes must give the new content
// byte for byte — files without a final newline (kept, added, removed,
// changed far from the end), CRLF lines, a file emptied and one filled.
func TestApplyBytesAsGitWritesTheDiff(t *testing.T) {
	needs.Program(t, "git", "apt-get install git", "git")
	long := strings.Repeat("line\n", 20)
	for _, tc := range []struct{ name, old, new string }{
		{"a line changed", "a\nb\nc\n", "a\nB\nc\n"},
		{"a final newline added", "a\nb\nc", "a\nb\nc\n"},
		{"the final newline removed", "a\nb\nc\n", "a\nb\nc"},
		{"a file without one changed at its end", "a\nb\nc", "A\nb\nc"},
		{"a file without one changed far from its end", "x\ny\n" + long + "z", "x\nY\n" + long + "z"},
		{"a line added to a file without one", "x\n" + long + "z", "x\n" + long + "z\nw"},
		{"CRLF lines", "a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"},
		{"emptied", "x\ny\n", ""},
		{"filled without a final newline", "", "x\ny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			oldPath, newPath := filepath.Join(dir, "old"), filepath.Join(dir, "new")
			if err := os.WriteFile(oldPath, []byte(tc.old), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(newPath, []byte(tc.new), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("git", "diff", "--no-index", "--no-color", oldPath, newPath).Output()
			var exit *exec.ExitError
			if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
				t.Fatalf("git diff: %v", err)
			}
			fps, err := Parse(string(out))
			if err != nil || len(fps) != 1 {
				t.Fatalf("parse %q: %v (%d files)", out, err, len(fps))
			}
			got, err := ApplyBytes([]byte(tc.old), fps[0])
			if err != nil || string(got) != tc.new {
				t.Errorf("ApplyBytes: %q, %v; want %q\npatch:\n%s", got, err, tc.new, out)
			}
		})
	}
}

// TestReverseIsGitsDiffTheOtherWay: for pairs of trees, Reverse(git diff
// A B) is git diff B A, byte for byte — changed lines in runs, an added
// and a deleted file, a rename with a change, a mode change, files without
// a final newline; and applied to B it gives A.
func TestReverseIsGitsDiffTheOtherWay(t *testing.T) {
	needs.Program(t, "git", "apt-get install git", "git")
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).Output()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
			t.Fatalf("git %v: %v", args, err)
		}
		return string(out)
	}
	write := func(files map[string]string) {
		for name, content := range files {
			p := filepath.Join(dir, name)
			if content == "" {
				os.Remove(p)
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	git("init", "-q")
	long := strings.Repeat("keep\n", 12)
	write(map[string]string{"a.py": "def f():\n    x = 1\n    y = 2\n    return x + y\n" + long + "z = 0\n", "gone.py": "bye\n",
		"old/name.py": "n = 1\nm = 2\n" + long, "tail.py": "a\nb", "run.sh": "echo hi\n"})
	git("add", "-A")
	git("commit", "-qm", "A")
	write(map[string]string{"a.py": "def f():\n    x = 10\n    y = 20\n    w = 3\n    return x + y\n" + long + "z = 1\n", "gone.py": "",
		"old/name.py": "", "new/name.py": "n = 1\nm = 3\n" + long, "tail.py": "a\nc", "added.py": "new\n"})
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("commit", "-qm", "B")
	forward, backward := git("diff", "-M", "--no-color", "HEAD~1", "HEAD"), git("diff", "-M", "--no-color", "HEAD", "HEAD~1")
	for _, want := range []string{"rename from", "new file mode", "deleted file mode", "old mode", `\ No newline`} {
		if !strings.Contains(forward, want) {
			t.Fatalf("the diff lacks %q, which the test is about:\n%s", want, forward)
		}
	}
	if got := Reverse(forward); got != backward {
		t.Errorf("Reverse(git diff A B):\n%s\nwant git diff B A:\n%s", got, backward)
	}
	if got := Reverse(Reverse(forward)); got != forward {
		t.Errorf("Reverse twice is not the diff itself:\n%s", got)
	}
}

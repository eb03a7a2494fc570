package diff

import (
	"errors"
	"reflect"
	"strings"
	"testing"
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

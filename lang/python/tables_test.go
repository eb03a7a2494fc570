package python

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBlankNumberTables(t *testing.T) {
	table := func(open, close string) string {
		return open + strings.Repeat("1, -2,\n 0x1F, 3L, 4.5e-3, # note\n", 8) + close
	}
	blank := func(s string) string {
		b := []byte(s)
		for i := 1; i < len(b)-1; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"a tuple", "T = " + table("(", ")"), "T = " + blank(table("(", ")"))},
		{"a list", "L = " + table("[", "]") + "\n", "L = " + blank(table("[", "]")) + "\n"},
		{"call arguments", "f" + table("(", ")"), "f" + blank(table("(", ")"))},
		{"a subscript stays", "x" + table("[", "]"), "x" + table("[", "]")},
		{"a subscript on the next line stays", "(x\n" + table("[", "]") + ")", "(x\n" + table("[", "]") + ")"},
		{"a name inside stays", "T = (" + strings.Repeat("1, ", 40) + "a)", "T = (" + strings.Repeat("1, ", 40) + "a)"},
		{"too short stays", "T = (1, 2, 3)", "T = (1, 2, 3)"},
		{"inside a string stays", `s = "` + table("(", ")")[:40] + `"`, `s = "` + table("(", ")")[:40] + `"`},
		{"inside a comment stays", "# " + strings.ReplaceAll(table("(", ")"), "\n", " "), "# " + strings.ReplaceAll(table("(", ")"), "\n", " ")},
		{"missing commas stay", "T = (" + strings.Repeat("1 ", 40) + ")", "T = (" + strings.Repeat("1 ", 40) + ")"},
		{"glued names stay", "T = (" + strings.Repeat("1, ", 40) + "2x)", "T = (" + strings.Repeat("1, ", 40) + "2x)"},
		{"nested tables blank inside", "T = (" + table("(", ")") + ",)", "T = (" + blank(table("(", ")")) + ",)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(blankNumberTables([]byte(tc.src)))
			if got != tc.want {
				t.Errorf("blankNumberTables:\n%q\nwant\n%q", got, tc.want)
			}
			if len(got) != len(tc.src) || strings.Count(got, "\n") != strings.Count(tc.src, "\n") {
				t.Error("offsets or lines moved")
			}
		})
	}
}

// TestBlankingKeepsTheStructure parses files with and without their number
// tables blanked and compares everything extracted: the testdata here
// always, and every .py file under A2FARM_BENCH_PYDIR (a `git archive` of
// a real repository) when set.
func TestBlankingKeepsTheStructure(t *testing.T) {
	roots := []string{"testdata"}
	if dir := os.Getenv("A2FARM_BENCH_PYDIR"); dir != "" {
		roots = append(roots, dir)
	}
	p := newTestParser(t)
	files, blanked := 0, 0
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".py") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			fast := blankNumberTables(src)
			if string(fast) == string(src) {
				return nil
			}
			blanked++
			want, err := p.parse(path, src)
			if err != nil {
				return err
			}
			got, err := p.parse(path, fast)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: the structure differs once its number tables are blanked", path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if blanked == 0 {
		t.Fatalf("none of %d files has a number table: the comparison checked nothing", files)
	}
	t.Logf("%d of %d files had number tables; all parse the same", blanked, files)
}

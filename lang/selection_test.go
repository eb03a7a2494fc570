package lang_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/java"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/lang/typescript"
)

func registry() *lang.Set {
	return lang.NewSet(python.Language{}, golang.Language{}, typescript.Language{}, java.Language{})
}

// TestSelection: the --languages rule against the row's own language,
// for every kind of value.
func TestSelection(t *testing.T) {
	cases := []struct {
		flag, row string
		want      []string
		err       string // in ParseSelection or ForRow
	}{
		{flag: "", row: "", want: []string{"python"}},                                     // SWE-bench, Verified: the paper's Python
		{flag: "", row: "go", want: []string{"go"}},                                       // SWE-bench Pro's repo_language
		{flag: "", row: "js", want: []string{"typescript"}},                               // its alias for JavaScript
		{flag: "", row: "TS", want: []string{"typescript"}},                               // any case
		{flag: "", row: "java", want: []string{"java"}},                                   // Multi-SWE-bench's language
		{flag: "", row: "rust", err: `the row's language "rust" is not one a2farm reads`}, // rejected, not read as Python
		{flag: "all", row: "", want: []string{"python", "go", "typescript", "java"}},
		{flag: "ALL", row: "go", want: []string{"python", "go", "typescript", "java"}}, // the run's rule wins
		{flag: "java, py", row: "go", want: []string{"python", "java"}},                // registry order, aliases
		{flag: "javascript,ts", row: "", want: []string{"typescript"}},
		{flag: "python,cobol", err: `"cobol" is not a language a2farm reads (python, go, typescript, java)`},
		{flag: "all,go", err: "all stands alone"},
		{flag: " , ", err: "no language named"},
	}
	for _, c := range cases {
		t.Run(c.flag+"/"+c.row, func(t *testing.T) {
			sel, err := lang.ParseSelection(registry(), c.flag)
			var got []string
			if err == nil {
				got, err = sel.ForRow(c.row)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("languages %v, want %v", got, c.want)
			}
			if sel.Fixed() != (strings.TrimSpace(c.flag) != "") {
				t.Errorf("Fixed() = %v for %q", sel.Fixed(), c.flag)
			}
		})
	}
}

// TestSelectionWithoutRows: a snapshot named without a dataset row is
// read as Python unless the run names its languages; String gives the
// rule back as a flag value, for a resumed run to compare.
func TestSelectionWithoutRows(t *testing.T) {
	for flag, want := range map[string][]string{"": {"python"}, "all": {"python", "go", "typescript", "java"}, "go,ts": {"go", "typescript"}} {
		sel, err := lang.ParseSelection(registry(), flag)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Set().Names(); !slices.Equal(got, want) {
			t.Errorf("--languages %q reads a snapshot as %v, want %v", flag, got, want)
		}
		if again := sel.String(); again != map[string]string{"": "", "all": "all", "go,ts": "go,typescript"}[flag] {
			t.Errorf("--languages %q gives back %q", flag, again)
		}
	}
	var zero lang.Selection
	if names, err := zero.ForRow("go"); names != nil || err != nil {
		t.Errorf("the zero selection named %v, %v; want nothing", names, err)
	}
	if _, err := lang.ParseSelection(lang.NewSet(golang.Language{}), ""); err == nil {
		t.Error("a registry without Python took the default rule")
	}
}

// TestSelectKeysTheCache: a subset is a set of its own, with its own cache
// key; selecting every language gives the registry itself.
func TestSelectKeysTheCache(t *testing.T) {
	reg := registry()
	sub, err := reg.Select([]string{"java", "python"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Key() != "python@"+(python.Language{}).Version()+"+java@"+(java.Language{}).Version() {
		t.Errorf("key %q", sub.Key())
	}
	if sub.Reads("a/B.java") == false || sub.Reads("a/b.go") {
		t.Error("the subset reads the wrong files")
	}
	if all, _ := reg.Select(reg.Names()); all != reg {
		t.Error("selecting every language made a new set")
	}
	if none, _ := reg.Select(nil); none != reg {
		t.Error("selecting no names did not keep every language")
	}
}

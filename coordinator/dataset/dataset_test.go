package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/java"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/lang/typescript"
	"github.com/a2farm/a2farm/schema"
)

const goodRow = `{"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abcdef1", "problem_statement": "p", "patch": "d", "hints_text": "h", "version": 1.2}`

func TestReadValidatesRows(t *testing.T) {
	tests := []struct {
		name string
		row  string
		want string // substring of the reason
	}{
		{"invalid json", `{"instance_id": "o__r-2",`, "invalid JSON"},
		{"not an object", `[1, 2]`, "invalid JSON"},
		{"null row", `null`, "want an object"},
		{"missing field", `{"instance_id": "o__r-2", "repo": "o/r", "base_commit": "abcdef1", "patch": "d"}`, `missing field "problem_statement"`},
		{"wrong type", `{"instance_id": "o__r-2", "repo": "o/r", "base_commit": 12, "problem_statement": "p", "patch": "d"}`, `field "base_commit" must be a string`},
		{"empty field", `{"instance_id": "o__r-2", "repo": "o/r", "base_commit": "abcdef1", "problem_statement": " ", "patch": "d"}`, `field "problem_statement" is empty`},
		{"bad repo", `{"instance_id": "o__r-2", "repo": "../etc", "base_commit": "abcdef1", "problem_statement": "p", "patch": "d"}`, "not owner/name"},
		{"bad commit", `{"instance_id": "o__r-2", "repo": "o/r", "base_commit": "main", "problem_statement": "p", "patch": "d"}`, "not a commit id"},
		{"duplicate", goodRow, "duplicate instance_id (first on line 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := goodRow + "\n\n" + tt.row + "\n"
			res, err := Read(context.Background(), strings.NewReader(input), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Instances) != 1 || len(res.Skipped) != 1 {
				t.Fatalf("instances %d skipped %d, want 1 and 1", len(res.Instances), len(res.Skipped))
			}
			skip := res.Skipped[0]
			if skip.Line != 3 || !strings.Contains(skip.Reason, tt.want) {
				t.Errorf("skipped = %v, want line 3 with %q", skip, tt.want)
			}

			_, err = Read(context.Background(), strings.NewReader(input), Options{Strict: true})
			var rowErr *RowError
			if !errors.As(err, &rowErr) || rowErr.Line != 3 {
				t.Errorf("strict: err = %v, want a RowError on line 3", err)
			}
		})
	}
}

func TestReadKeepsExtraFields(t *testing.T) {
	res, err := Read(context.Background(), strings.NewReader(goodRow), Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := res.Instances[0]
	if in.InstanceID != "o__r-1" || in.PackageName() != "o" {
		t.Errorf("instance = %+v", in)
	}
	if string(in.Extra) != `{"hints_text":"h","version":1.2}` {
		t.Errorf("extra = %s", in.Extra)
	}
}

func TestLoadChecksReposAndCommits(t *testing.T) {
	l, err := sample.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	good, _ := json.Marshal(l.Instances[0])
	unknownRepo := strings.Replace(string(good), `"repo":"acme/inventory"`, `"repo":"acme/missing"`, 1)
	badCommit := strings.Replace(string(good), l.Instances[0].BaseCommit, "0123456789abcdef0123456789abcdef01234567", 1)
	badCommit = strings.Replace(badCommit, l.Instances[0].InstanceID, "acme__inventory-99", 1)
	unknownRepo = strings.Replace(unknownRepo, l.Instances[0].InstanceID, "acme__inventory-98", 1)
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte(string(good)+"\n"+unknownRepo+"\n"+badCommit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Load(context.Background(), path, Options{Repos: repos})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 || len(res.Skipped) != 2 {
		t.Fatalf("instances %d skipped %v", len(res.Instances), res.Skipped)
	}
	if !strings.Contains(res.Skipped[0].Reason, "acme__missing") || !strings.Contains(res.Skipped[1].Reason, "commit 0123456789") {
		t.Errorf("reasons = %q / %q", res.Skipped[0].Reason, res.Skipped[1].Reason)
	}
}

func TestLoadParquet(t *testing.T) {
	rows := []schema.Instance{
		{InstanceID: "o__r-1", Repo: "o/r", BaseCommit: "abcdef1", ProblemStatement: "p", Patch: "d"},
		{InstanceID: "o__r-2", Repo: "o/r", BaseCommit: "abcdef2", ProblemStatement: "", Patch: "d"},
	}
	rec := schema.InstanceCodec().Encode(nil, rows)
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "d.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.WriteParquet(f, rec); err != nil {
		t.Fatal(err)
	}
	res, err := Load(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 || res.Instances[0].InstanceID != "o__r-1" {
		t.Errorf("instances = %+v", res.Instances)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Line != 2 || !strings.Contains(res.Skipped[0].Reason, "problem_statement") {
		t.Errorf("skipped = %v", res.Skipped)
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(context.Background(), filepath.Join(t.TempDir(), "none.jsonl"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want not-exist", err)
	}
}

func TestEmptyDatasetIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, strict := range []bool{false, true} {
		if _, err := Load(context.Background(), path, Options{Strict: strict}); !errors.Is(err, ErrEmpty) {
			t.Errorf("strict %v: an empty dataset loaded: %v", strict, err)
		}
	}
}

// TestSWEBenchProRows reads rows in SWE-bench Pro's published format: the
// agent gets the problem statement alone unless WithRequirements appends
// the requirements and the interface; the package name skips "instance_".
func TestSWEBenchProRows(t *testing.T) {
	row := `{"instance_id": "instance_ansible__ansible-f327e65d11bb905ed9f15996024f857a95592629-vba6da65a0f3baefda7a058ebbd0a8dcafb8512f5", "repo": "ansible/ansible", "base_commit": "f533d46572113655a0a698beab4b38671744a458", "patch": "diff --git a/x.py b/x.py\n", "test_patch": "", "problem_statement": "Names may be keywords.", "requirements": "- is_python_identifier must reject keywords", "interface": "Type: Function\nName: is_python_identifier", "repo_language": "python"}` + "\n"
	for _, tc := range []struct {
		with bool
		want string
	}{
		{false, "Names may be keywords."},
		{true, "Names may be keywords.\n\nRequirements:\n- is_python_identifier must reject keywords\n\nNew interfaces introduced:\nType: Function\nName: is_python_identifier"},
	} {
		res, err := Read(context.Background(), strings.NewReader(row), Options{Strict: true, WithRequirements: tc.with})
		if err != nil {
			t.Fatal(err)
		}
		in := res.Instances[0]
		if in.ProblemStatement != tc.want {
			t.Errorf("with requirements %v: problem statement %q, want %q", tc.with, in.ProblemStatement, tc.want)
		}
		if in.PackageName() != "ansible" || in.Repo != "ansible/ansible" {
			t.Errorf("package %q, repo %q", in.PackageName(), in.Repo)
		}
		var extra map[string]any
		if err := json.Unmarshal(in.Extra, &extra); err != nil || extra["repo_language"] != "python" || extra["requirements"] == nil {
			t.Errorf("extra fields not kept: %s", in.Extra)
		}
	}
}

// TestRowLanguages: each instance is read with the run's languages, else
// its row's (SWE-bench Pro's repo_language, Multi-SWE-bench's language),
// else Python; a row naming a language a2farm does not read is skipped
// with its line and instance.
func TestRowLanguages(t *testing.T) {
	reg := lang.NewSet(python.Language{}, golang.Language{}, typescript.Language{}, java.Language{})
	row := func(id, extra string) string {
		return `{"instance_id": "` + id + `", "repo": "o/r", "base_commit": "abcdef0", "problem_statement": "p", "patch": "diff --git a/x b/x\n"` + extra + "}\n"
	}
	data := row("verified", "") + row("pro-go", `, "repo_language": "go"`) + row("pro-js", `, "repo_language": "js"`) +
		row("multi-java", `, "language": "java"`) + row("multi-rust", `, "language": "rust"`) + row("null", `, "repo_language": null`)
	for _, c := range []struct {
		flag    string
		want    map[string][]string
		skipped string
	}{
		{"", map[string][]string{"verified": {"python"}, "pro-go": {"go"}, "pro-js": {"typescript"}, "multi-java": {"java"}, "null": {"python"}},
			`line 5 (multi-rust): the row's language "rust" is not one a2farm reads (python, go, typescript, java); --languages reads others`},
		{"go,java", map[string][]string{"verified": {"go", "java"}, "pro-go": {"go", "java"}, "pro-js": {"go", "java"}, "multi-java": {"go", "java"},
			"multi-rust": {"go", "java"}, "null": {"go", "java"}}, ""},
	} {
		sel, err := lang.ParseSelection(reg, c.flag)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Read(context.Background(), strings.NewReader(data), Options{Languages: sel})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for _, in := range res.Instances {
			got[in.InstanceID] = in.Languages
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("--languages %q: %v, want %v", c.flag, got, c.want)
		}
		var skipped []string
		for _, s := range res.Skipped {
			skipped = append(skipped, s.Error())
		}
		if strings.Join(skipped, "\n") != c.skipped {
			t.Errorf("--languages %q skipped %q, want %q", c.flag, skipped, c.skipped)
		}
	}
	if res, err := Read(context.Background(), strings.NewReader(row("x", `, "language": 3`)), Options{}); err != nil || len(res.Skipped) != 1 ||
		res.Skipped[0].Reason != `field "language" must be a string` {
		t.Errorf("a language that is not a string: %v %v", res, err)
	}
}

// TestSWESmithAndSWERebenchRows: a SWE-smith row (no base_commit; the
// mirror's name holds repository and commit, a name with dots included;
// the patch introduces the bug) reads as the mirror's commit plus that
// patch, with the reversed patch as the fix to locate; a SWE-rebench row
// (SWE-bench's columns, FAIL_TO_PASS as a list, a meta object) reads as
// SWE-bench's, its other columns kept.
func TestSWESmithAndSWERebenchRows(t *testing.T) {
	bug := "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
	fix := "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 3\n+y = 2\n"
	row := func(fields map[string]any) string {
		b, _ := json.Marshal(fields)
		return string(b) + "\n"
	}
	input := row(map[string]any{"instance_id": "pandas-dev__pandas.95280573.func_pm_op_swap__1", "repo": "swesmith/pandas-dev__pandas.95280573",
		"patch": bug, "problem_statement": "p", "FAIL_TO_PASS": []string{"t::a"}, "image_name": "swesmith.x86_64.pandas-dev__pandas.95280573"}) +
		row(map[string]any{"instance_id": "x.js-1", "repo": "swesmith/owner__x.js.0123abcd", "patch": bug, "problem_statement": "p"}) +
		row(map[string]any{"instance_id": "o__r-9", "repo": "o/r", "base_commit": "abcdef1", "patch": fix, "problem_statement": "p",
			"FAIL_TO_PASS": []string{"t::b"}, "meta": map[string]any{"is_lite": false}, "environment_setup_commit": "abcdef2"})
	res, err := Read(context.Background(), strings.NewReader(input), Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Instances
	if len(got) != 3 {
		t.Fatalf("%d instances", len(got))
	}
	if got[0].Repo != "pandas-dev/pandas" || got[0].BaseCommit != "95280573" || got[0].BasePatch != bug || got[0].Patch != fix {
		t.Errorf("SWE-smith row: %+v", got[0])
	}
	if !strings.Contains(string(got[0].Extra), `"image_name":"swesmith.x86_64.pandas-dev__pandas.95280573"`) {
		t.Errorf("SWE-smith row's other columns not kept: %s", got[0].Extra)
	}
	if got[1].Repo != "owner/x.js" || got[1].BaseCommit != "0123abcd" {
		t.Errorf("a mirror of a name with a dot: %+v", got[1])
	}
	if got[2].Repo != "o/r" || got[2].BasePatch != "" || got[2].Patch != fix || !strings.Contains(string(got[2].Extra), `"meta":{"is_lite":false}`) ||
		!strings.Contains(string(got[2].Extra), `"FAIL_TO_PASS":["t::b"]`) {
		t.Errorf("SWE-rebench row: %+v %s", got[2], got[2].Extra)
	}
}

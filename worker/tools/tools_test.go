package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/repoindex"
)

var sampleIndex = sync.OnceValues(func() (*repoindex.Index, error) {
	dir, err := osMkdirTemp()
	if err != nil {
		return nil, err
	}
	l, err := sample.Write(dir)
	if err != nil {
		return nil, err
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	return repoindex.Build(context.Background(), repos, sample.Repo, "main", repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})})
})

func newSampleSet(t *testing.T) *Set {
	t.Helper()
	idx, err := sampleIndex()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(idx, Options{ProblemStatement: "Warehouse breaks, see #12"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type call struct {
	name string
	args string
}

// TestObservationsGolden pins the observation text and surfaced ids of
// every tool on the sample repository, normal cases and each error case.
func TestObservationsGolden(t *testing.T) {
	s := newSampleSet(t)
	calls := []call{
		{GetEntityContents, `{"entity_names": ["inventory/models.py:Warehouse.remove_item"]}`},
		{GetEntityContents, `{"entity_names": ["inventory/pricing.py", " inventory/errors.py:OutOfStock. ", "inventory/storage"]}`},
		{GetEntityContents, `{"entity_names": ["inventory/utils/__init__.py", "", "inventory/models.py:Warehouse.__init__"]}`},
		{GetEntityContents, `{"entity_names": ["tests/test_models.py", "../../etc/passwd", "/etc/passwd", "inventory/nope.py:X"]}`},
		{GetEntityContents, `{"entity_names": "inventory/models.py"}`},
		{GetEntityContents, `{}`},
		{GetEntityContents, `{"entity_names": ["a"], "extra": 1}`},
		{GetEntityContents, `not json`},
		{ExploreTreeStructure, `{"start_entities": ["/"], "traversal_depth": 2, "dependency_type_filter": ["contains"]}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory/models.py:Warehouse"], "direction": "both"}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory/errors.py:UnknownItem.__init__"], "direction": "upstream", "traversal_depth": -1}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory/storage/"], "traversal_depth": 3, "entity_type_filter": ["class", "file"]}`},
		{ExploreTreeStructure, `{"start_entities": ["tests/test_models.py", "Warehouse", "inventory/zzz.py"]}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory"], "direction": "sideways"}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory"], "traversal_depth": -2}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory"], "dependency_type_filter": ["calls"]}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory"], "traversal_depth": "deep"}`},
		{ExploreTreeStructure, `{"start_entities": ["inventory"], "traversal_depth": 0, "entity_type_filter": null}`},
		{SearchCodeSnippets, `{"search_terms": ["inventory/pricing.py:compute_discount"]}`},
		{SearchCodeSnippets, `{"search_terms": ["remove_item", "unknown SKU raises KeyError"]}`},
		{SearchCodeSnippets, `{"search_terms": ["Warehouse.find", "PriceRule.__init__"]}`},
		{SearchCodeSnippets, `{"search_terms": ["class MemoryBackend"], "file_path_or_pattern": "inventory/storage/*.py"}`},
		{SearchCodeSnippets, `{"search_terms": ["slug"], "file_path_or_pattern": "nothing/matches/**"}`},
		{SearchCodeSnippets, `{"search_terms": ["tests/test_models.py", "test_value"]}`},
		{SearchCodeSnippets, `{"line_nums": [14, 44, 3], "file_path_or_pattern": "inventory/models.py"}`},
		{SearchCodeSnippets, `{"line_nums": [5], "file_path_or_pattern": "inventory/*.py"}`},
		{SearchCodeSnippets, `{"search_terms": ["json dump flush"], "file_path_or_pattern": "[[[[[[[[[[[[[[[["}`},
		{SearchCodeSnippets, `{"search_terms": ["zzzqqq"]}`},
		{SearchCodeSnippets, `{}`},
		{SearchCodeSnippets, `{"line_nums": [-5, 0, 999999], "file_path_or_pattern": "inventory/models.py"}`},
		{SearchCodeSnippets, `{"search_terms": ["", "  ", "...", "ünïcödé ☃"], "line_nums": [1]}`},
		{SearchCodeSnippets, `{"search_terms": [null]}`},
		{SearchCommit, `{"query": "text utilities"}`},
		{SearchCommit, `{"query": "Add", "top_k": 1}`},
		{SearchCommit, `{"query": "nothing matches this"}`},
		{SearchCommit, `{"query": "backends", "top_k": 0}`},
		{ViewSummary, `{"file_path": "inventory/storage/backends.py"}`},
		{ViewSummary, `{"file_path": "models.py"}`},
		{ViewSummary, `{"file_path": "tests/test_models.py"}`},
		{SearchSummary, `{"query": "Warehouse item"}`},
		{SearchSummary, `{"query": "storage", "top_k": 2}`},
		{SearchSummary, `{"query": "zzz"}`},
		{Finish, `{"answer": "` + "```\\ninventory/models.py\\nfunction: Warehouse.remove_item\\n```" + `"}`},
		{Finish, `{}`},
		{"run_shell", `{"cmd": "rm -rf /"}`},
	}
	var b strings.Builder
	for _, c := range calls {
		res := s.Call(context.Background(), c.name, json.RawMessage(c.args))
		fmt.Fprintf(&b, "=== %s %s\n%s\n--- surfaced files=%q modules=%q entities=%q finish=%v answer=%q\n\n",
			c.name, c.args, res.Observation, res.Surfaced.Files, res.Surfaced.Modules, res.Surfaced.Entities, res.Finish, res.Answer)
	}
	golden.Check(t, "observations.golden.txt", []byte(b.String()))
}

// TestCommitLeakFilter: the sample's "Add storage backends" commit cites
// #12 and #7; an issue that mentions #7 must not see it.
func TestCommitLeakFilter(t *testing.T) {
	idx, err := sampleIndex()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		problem string
		visible bool
	}{{"Backends lose data (#7)", false}, {"Backends lose data (#70)", true}, {"", true}} {
		s, err := New(idx, Options{ProblemStatement: tt.problem})
		if err != nil {
			t.Fatal(err)
		}
		res := s.Call(context.Background(), SearchCommit, json.RawMessage(`{"query": "storage backends"}`))
		if got := strings.Contains(res.Observation, "Add storage backends"); got != tt.visible {
			t.Errorf("problem %q: commit visible = %v, want %v\n%s", tt.problem, got, tt.visible, res.Observation)
		}
	}
}

// TestOddArgumentsNeverPanic feeds every tool malformed, extreme and
// mistyped arguments; each must come back as an observation.
func TestOddArgumentsNeverPanic(t *testing.T) {
	s := newSampleSet(t)
	odd := []string{`null`, `[]`, `"x"`, `{"a":`, `{}`, `{"search_terms": [1, 2]}`, `{"line_nums": ["x"]}`,
		`{"start_entities": [""], "traversal_depth": 99999999}`, `{"entity_names": [null]}`,
		`{"query": "", "top_k": 50}`, `{"file_path": "../../../../etc/passwd"}`, `{"start_entities": ["/"], "direction": null}`,
		`{"search_terms": ["a"], "file_path_or_pattern": "[!]]**?*[a-"}`, `{"answer": 5}`}
	for _, name := range AllNames() {
		for _, args := range odd {
			res := s.Call(context.Background(), name, json.RawMessage(args))
			if strings.Contains(res.Observation, "internal error") {
				t.Errorf("%s %s: %s", name, args, res.Observation)
			}
		}
	}
}

func TestHugeArraysAreRefused(t *testing.T) {
	s := newSampleSet(t)
	names := make([]string, MaxListArgs+1)
	for i := range names {
		names[i] = "inventory/models.py"
	}
	args, _ := json.Marshal(map[string]any{"entity_names": names})
	res := s.Call(context.Background(), GetEntityContents, args)
	if !strings.Contains(res.Observation, "at most 64") {
		t.Errorf("observation = %q", res.Observation)
	}
}

func TestObservationCaps(t *testing.T) {
	long := strings.Repeat("é", 9000)
	if got := Cut(long, ToolCap, toolCutSuffix); !strings.HasSuffix(got, "\n... (truncated, 9000 chars total)") ||
		strings.Count(got, "é") != ToolCap {
		t.Errorf("tool cut: %d runes, suffix %q", strings.Count(got, "é"), got[len(got)-40:])
	}
	if got := Cut("short", ToolCap, toolCutSuffix); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	s := newSampleSet(t)
	// Every file of the sample at once exceeds the 8,000-character tool cap.
	var all []string
	for _, n := range s.idx.Graph.Nodes {
		if n.Type == codegraph.File {
			all = append(all, n.ID)
		}
	}
	args, _ := json.Marshal(map[string]any{"entity_names": all})
	res := s.Call(context.Background(), GetEntityContents, args)
	if !strings.Contains(res.Observation, "... (truncated, ") {
		t.Fatalf("no truncation note in a %d-char observation", len(res.Observation))
	}
	for _, f := range res.Surfaced.Files {
		if !strings.Contains(res.Observation, f) {
			t.Errorf("surfaced %s, which the cut observation no longer shows", f)
		}
	}
}

func TestUnknownToolInNew(t *testing.T) {
	idx, err := sampleIndex()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(idx, Options{Enabled: []string{"rm_rf"}}); err == nil {
		t.Error("New accepted an unknown tool name")
	}
	s, err := New(idx, Options{Enabled: []string{Finish, GetEntityContents}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Tools()); n != 2 {
		t.Errorf("tools = %d, want 2", n)
	}
	res := s.Call(context.Background(), ExploreTreeStructure, json.RawMessage(`{"start_entities":["/"]}`))
	if !strings.Contains(res.Observation, "Unknown tool") {
		t.Errorf("disabled tool ran: %q", res.Observation)
	}
}

func osMkdirTemp() (string, error) {
	dir, err := filepath.Abs(filepath.Join(tempRoot(), "sample"))
	return dir, err
}

// TestOversizedArgumentsAreRefused: a pasted file as a search term, or a
// flood of values, is answered at once with what to do instead.
func TestOversizedArgumentsAreRefused(t *testing.T) {
	set := newSampleSet(t)
	long := strings.Repeat("warehouse ", 100_000) // 1 MB
	for _, args := range []string{
		`{"search_terms": ["` + long[:MaxArgBytes+10] + `"]}`,
		`{"search_terms": ["` + long[:MaxArgString+1] + `"]}`,
		`{"entity_names": [` + strings.Repeat(`"a",`, maxArgEntries) + `"a"]}`,
	} {
		start := time.Now()
		res := set.Call(context.Background(), SearchCodeSnippets, json.RawMessage(args))
		if !strings.Contains(res.Observation, "Invalid arguments") || time.Since(start) > time.Second {
			t.Errorf("%d-byte arguments: %.80q after %s", len(args), res.Observation, time.Since(start))
		}
	}
}

// TestGlobPatterns: fnmatch as the reference reads it ("*" crosses "/"),
// and braces for alternatives.
func TestGlobPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"**/*.py", "inventory/models.py", true},
		{"**/*.py", "models.py", false}, // fnmatch: "**/" needs a folder
		{"*.py", "inventory/models.py", true},
		{"**/*{.py,.go,.ts}", "cmd/main.go", true},
		{"**/*{.py,.go,.ts}", "web/app.tsx", false},
		{"src/*.{ts,tsx}", "src/ui/app.tsx", true},
		{"src/{a,b}/*.java", "src/b/X.java", true},
		{"src/{a,b}/*.java", "src/c/X.java", false},
		{"{x}.py", "{x}.py", true}, // no alternatives: a brace is itself
		{"x{.py", "x{.py", true},
		{"inventory/[!m]*.py", "inventory/pricing.py", true},
		{"inventory/[!m]*.py", "inventory/models.py", false},
	} {
		re, err := globRegexp(c.pattern)
		if err != nil {
			t.Fatalf("%s: %v", c.pattern, err)
		}
		if got := re.MatchString(c.path); got != c.want {
			t.Errorf("%s matches %s: %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

// TestDefaultPatternOfSeveralLanguages: without a file pattern, a search
// of an index read with several languages covers their files and says
// nothing about a pattern; before braces were read it announced "No files
// found for file pattern '**/*{.py,.go,...}'. Will search all files."
func TestDefaultPatternOfSeveralLanguages(t *testing.T) {
	reposDir := t.TempDir()
	r, err := repogen.Init(filepath.Join(reposDir, "o__r"))
	if err != nil {
		t.Fatal(err)
	}
	commit, err := r.Commit("", repogen.Change{Message: "base", Write: map[string]string{
		"app/stock.py": "def restock_items():\n    return 1\n", "cli/stock.go": "package cli\n\nfunc RestockItems() int { return 1 }\n"}})
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	idx, err := repoindex.Build(context.Background(), repos, "o/r", commit, repoindex.BuildOptions{Languages: lang.NewSet(python.Language{}, golang.Language{})})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	s, err := New(idx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := s.Call(context.Background(), "search_code_snippets", json.RawMessage(`{"search_terms": ["RestockItems", "restock_items"]}`))
	if strings.Contains(res.Observation, "No files found") {
		t.Errorf("the default pattern matched no file:\n%s", res.Observation)
	}
	for _, want := range []string{"cli/stock.go:RestockItems", "app/stock.py:restock_items"} {
		if !slices.Contains(res.Surfaced.Entities, want) {
			t.Errorf("%s not surfaced: %v\n%s", want, res.Surfaced.Entities, res.Observation)
		}
	}
}

// TestASpecKeepsTheShardsKeyOrder: a request carries each tool spec with its
// keys in the OpenAI format's order — type, then the function's name,
// description and parameters (the schema text as written) — the order the
// learner's shards keep and the trainer renders through the chat template.
// A template writes the spec as JSON into the prompt, so another order
// (Go maps marshal theirs sorted: function first, description before name)
// is other prompt tokens than the trainer trains on.
func TestASpecKeepsTheShardsKeyOrder(t *testing.T) {
	tool := finishTool()
	data, err := json.Marshal(tool.Spec())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"function","function":{"name":"finish","description":` + string(mustJSON(t, tool.Description)) +
		`,"parameters":` + string(tool.Parameters) + `}}`
	if string(data) != want {
		t.Errorf("spec JSON\n%s\nwant\n%s", data, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

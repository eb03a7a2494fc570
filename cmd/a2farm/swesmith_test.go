package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
)

// TestSWESmithRowsAreABasePlusAPatch: SWE-smith rows as published — no
// base_commit; repo names the mirror swesmith/<owner>__<name>.<commit>;
// patch introduces the bug. The snapshot is that commit with the patch
// applied, made without a checkout, a branch or a commit of the user's;
// the gold is where the reversed patch (the fix) edits it; localize plays
// it; the tools read the patched files, and a history search does not show
// the patch; the farm (up) plays and shards it. A row whose patch does not
// apply, and a mirror name without a commit, are rejected with their lines.
func TestSWESmithRowsAreABasePlusAPatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sample")
	if code, _, errOut := run(t, "sample", "--out", dir); code != 0 {
		t.Fatalf("sample: %s", errOut)
	}
	repos := filepath.Join(dir, "repos")
	data, err := os.ReadFile(filepath.Join(dir, "dataset.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(string(data), "\n", 2)[0]), &first); err != nil {
		t.Fatal(err)
	}
	base, bug := first["base_commit"].(string), first["patch"].(string) // the sample's fix serves as the "bug"
	mirror := "swesmith/acme__inventory." + base[:8]
	row := func(id, repo, patch string) string {
		b, _ := json.Marshal(map[string]any{"instance_id": id, "repo": repo, "patch": patch,
			"problem_statement": "remove_item raises the wrong error", "FAIL_TO_PASS": []string{"tests/test_models.py::test_remove"},
			"PASS_TO_PASS": []string{}, "image_name": "swesmith.x86_64." + strings.TrimPrefix(repo, "swesmith/")})
		return string(b) + "\n"
	}
	smith := filepath.Join(dir, "smith.jsonl")
	rows := row("acme__inventory."+base[:8]+".func_pm_remove_cond__1", mirror, bug) +
		row("acme__inventory."+base[:8]+".lm_rewrite__2", mirror, strings.Replace(bug, "item = self._items[sku]", "item = self.items[sku]", 1)) +
		row("acme__inventory.no_commit__3", "swesmith/acme__inventory", bug)
	if err := os.WriteFile(smith, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}

	gt := filepath.Join(dir, "smith-gt.jsonl")
	code, out, errOut := run(t, "gold", "--dataset", smith, "--repos", repos, "--out", gt)
	if code != 0 {
		t.Fatalf("gold: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"skipping row: patch of acme__inventory." + base[:8] + ".lm_rewrite__2: inventory/models.py: hunk #1 (at line 33) does not apply instance=acme__inventory." + base[:8] + ".lm_rewrite__2 line=2",
		`skipping row: missing field "base_commit" instance=acme__inventory.no_commit__3 line=3`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("gold does not say %q:\n%s", want, errOut)
		}
	}
	gold, err := os.ReadFile(gt)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(gold), "\n"); n != 1 || !strings.Contains(string(gold), `"edited_entities":["inventory/models.py:Warehouse.remove_item"]`) {
		t.Errorf("gold rows (want the fix, the reversed patch, located at Warehouse.remove_item):\n%s", gold)
	}

	code, out, errOut = run(t, "localize", "--dataset", smith, "--repos", repos, "--samples", "1", "--out", filepath.Join(dir, "loc"))
	if code != 0 || !strings.Contains(out+errOut, "1 instances") && !strings.Contains(out+errOut, "1 instance") {
		t.Errorf("localize: exit %d\n%s%s", code, out, errOut)
	}

	// Through the farm: the worker writes the snapshot in its own copy of
	// the repository and the learner shards the instance's group.
	code, out, errOut = run(t, "up", "--dataset", smith, "--repos", repos, "--samples", "2", "--workers", "1", "--out", filepath.Join(dir, "up"))
	if code != 0 {
		t.Errorf("up: exit %d\n%s%s", code, out, errOut)
	}
	if manifests, _ := filepath.Glob(filepath.Join(dir, "up", "learner", "shards", "*", "*", "*", "manifest.json")); len(manifests) != 1 {
		t.Errorf("up sharded %d groups, want the one instance's", len(manifests))
	}

	set := gitrepo.NewSet(repos)
	defer set.Close()
	commit, err := set.Snapshot("acme/inventory", base[:8], bug, "acme__inventory."+base[:8]+".func_pm_remove_cond__1")
	if err != nil {
		t.Fatal(err)
	}
	snapshot := []string{"--repos", repos, "--repo", "acme/inventory", "--commit", commit}
	code, out, errOut = run(t, append([]string{"tool", "--name", "get_entity_contents", "--args", `{"entity_names": ["inventory/models.py:Warehouse.remove_item"]}`}, snapshot...)...)
	if code != 0 || !strings.Contains(out, "raise UnknownItem(sku)") {
		t.Errorf("the tools do not read the patched snapshot: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, append([]string{"tool", "--name", "search_commit", "--args", `{"query": "with its patch applied"}`}, snapshot...)...)
	if code != 0 || !strings.Contains(out, "No commits found matching") {
		t.Errorf("a history search shows the snapshot's own commit: exit %d\n%s%s", code, out, errOut)
	}
}

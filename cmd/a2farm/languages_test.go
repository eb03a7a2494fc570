package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/schema"
)

// mixedRepo is a Python project with a JavaScript front end and a Java
// client, like sphinx (its locale .js files, karma.conf.js) or
// openlibrary: base and fix commits whose diff edits all three.
func mixedRepo(t *testing.T, reposDir string) (base, patch string) {
	t.Helper()
	r, err := repogen.Init(filepath.Join(reposDir, "acme__mixed"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"mixed/core.py":       "class Engine:\n    def start(self):\n        return 1\n\n\ndef boot():\n    return Engine().start()\n",
		"mixed/static/app.js": "class Widget {\n  render() { return 1; }\n}\nfunction mount() { return new Widget().render(); }\n",
		"karma.conf.js":       "module.exports = function (config) { config.set({}); };\n",
		"client/src/main/java/com/acme/Client.java":  "package com.acme;\n\npublic class Client {\n  public int call() {\n    return 1;\n  }\n}\n",
		"client/src/main/java/com/acme/Options.java": "package com.acme;\n\npublic record Options(int retries) {}\n",
	}
	base, err = r.Commit("", repogen.Change{Message: "base", Write: files})
	if err != nil {
		t.Fatal(err)
	}
	fix, err := r.Commit(base, repogen.Change{Message: "fix", Write: map[string]string{
		"mixed/core.py":                             strings.Replace(files["mixed/core.py"], "return 1", "return 2", 1),
		"mixed/static/app.js":                       strings.Replace(files["mixed/static/app.js"], "return 1", "return 2", 1),
		"client/src/main/java/com/acme/Client.java": strings.Replace(files["client/src/main/java/com/acme/Client.java"], "return 1", "return 2", 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if patch, err = r.Diff(base, fix); err != nil {
		t.Fatal(err)
	}
	return base, patch
}

// TestARunReadsTheLanguagesOfItsBenchmark: a SWE-bench row (no language
// column) is read as Python — gold, graph and tools — as the paper's
// tools read it; a row naming its language is read as that; --languages
// overrides both, and "all" reads every file a language matches. Before
// --languages, every command read every language: the gold of the
// Python row named the .js and .java edits too, and the graph held their
// nodes.
func TestARunReadsTheLanguagesOfItsBenchmark(t *testing.T) {
	dir := t.TempDir()
	reposDir := filepath.Join(dir, "repos")
	base, patch := mixedRepo(t, reposDir)
	row := func(id, language string) map[string]any {
		r := map[string]any{"instance_id": id, "repo": "acme/mixed", "base_commit": base, "problem_statement": "Engine.start returns the wrong value", "patch": patch}
		if language != "" {
			r["repo_language"] = language
		}
		return r
	}
	datasetPath := filepath.Join(dir, "dataset.jsonl")
	var lines []string
	for _, r := range []map[string]any{row("acme__mixed-1", ""), row("acme__mixed-2", "js"), row("acme__mixed-3", "java")} {
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(datasetPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	goldFiles := func(args ...string) map[string][]string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "gt.jsonl")
		if code, _, stderr := run(t, append([]string{"gold", "--dataset", datasetPath, "--repos", reposDir, "--out", out}, args...)...); code != 0 {
			t.Fatalf("gold %v: exit %d\n%s", args, code, stderr)
		}
		rows, err := readFile(out, schema.ReadGold)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for _, g := range rows {
			got[g.InstanceID] = g.Locations().Files
		}
		return got
	}
	py, js, java := []string{"mixed/core.py"}, []string{"mixed/static/app.js"}, []string{"client/src/main/java/com/acme/Client.java"}
	for _, c := range []struct {
		flag []string
		want map[string][]string
	}{
		{nil, map[string][]string{"acme__mixed-1": py, "acme__mixed-2": js, "acme__mixed-3": java}},
		{[]string{"--languages", "python,java"}, map[string][]string{"acme__mixed-1": append(py, java...), "acme__mixed-2": append(py, java...), "acme__mixed-3": append(py, java...)}},
		{[]string{"--languages", "all"}, map[string][]string{"acme__mixed-1": append(append(py, js...), java...), "acme__mixed-2": append(append(py, js...), java...),
			"acme__mixed-3": append(append(py, js...), java...)}},
	} {
		got := goldFiles(c.flag...)
		for id, want := range c.want {
			if g := got[id]; !sameSet(g, want) {
				t.Errorf("gold %v: %s edits %v, want %v", c.flag, id, g, want)
			}
		}
	}

	graphNodes := func(args ...string) (ids []string, stderr string) {
		t.Helper()
		code, stdout, stderr := run(t, append([]string{"index", "graph", "--repos", reposDir, "--repo", "acme/mixed", "--commit", base}, args...)...)
		if code != 0 {
			t.Fatalf("index graph %v: exit %d\n%s", args, code, stderr)
		}
		for line := range strings.SplitSeq(strings.TrimSpace(stdout), "\n") {
			var n struct{ Node, Type string }
			if json.Unmarshal([]byte(line), &n) == nil && n.Node != "" && n.Type != "directory" {
				ids = append(ids, n.Node)
			}
		}
		return ids, stderr
	}
	ids, stderr := graphNodes()
	if want := []string{"mixed/core.py", "mixed/core.py:Engine", "mixed/core.py:Engine.start", "mixed/core.py:boot"}; !slices.Equal(ids, want) {
		t.Errorf("index graph read %v; want Python only, %v", ids, want)
	}
	if !strings.Contains(stderr, "read as python: 1 files; 2 typescript, 2 java files left unread") {
		t.Errorf("index graph did not say what it left unread:\n%s", stderr)
	}
	ids, _ = graphNodes("--languages", "all")
	for _, want := range []string{"mixed/static/app.js:Widget.render", "karma.conf.js", "client/src/main/java/com/acme/Client.java:Client.call",
		"client/src/main/java/com/acme/Options.java:Options"} {
		if !slices.Contains(ids, want) {
			t.Errorf("index graph --languages all lacks %s: %v", want, ids)
		}
	}
	if _, stderr := graphNodes("--languages", "go"); !strings.Contains(stderr, "WRN read as go: 0 files; 1 python, 2 typescript, 2 java files left unread") {
		t.Errorf("a snapshot without a file of its languages did not warn:\n%s", stderr)
	}
	if code, _, stderr := run(t, "index", "graph", "--repos", reposDir, "--repo", "acme/mixed", "--commit", base, "--languages", "cobol"); code != exitUsage ||
		!strings.Contains(stderr, `--languages "cobol": "cobol" is not a language a2farm reads (python, go, typescript, java)`) {
		t.Errorf("an unknown language: exit %d\n%s", code, stderr)
	}

	// The rollouts read the same: the Java row's tools show Java only.
	out := filepath.Join(dir, "localize")
	if code, _, stderr := run(t, "localize", "--dataset", datasetPath, "--repos", reposDir, "--samples", "1", "--out", out); code != 0 {
		t.Fatalf("localize: exit %d\n%s", code, stderr)
	}
	surfaced := map[string]map[string]bool{}
	for _, id := range []string{"acme__mixed-1", "acme__mixed-2", "acme__mixed-3"} {
		trs, err := schema.ReadTrajectoryFile(filepath.Join(out, "trajectories", id+".arrow"))
		if err != nil {
			t.Fatal(err)
		}
		surfaced[id] = map[string]bool{}
		for _, tr := range trs {
			for _, turn := range tr.Turns {
				for _, f := range turn.Surfaced.Files {
					surfaced[id][filepath.Ext(f)] = true
				}
			}
		}
	}
	for id, want := range map[string]string{"acme__mixed-1": ".py", "acme__mixed-2": ".js", "acme__mixed-3": ".java"} {
		if len(surfaced[id]) != 1 || !surfaced[id][want] {
			t.Errorf("%s's tools surfaced files %v; want %s only", id, surfaced[id], want)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

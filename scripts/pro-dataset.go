//go:build ignore

// pro-dataset writes SWE-bench Pro rows in the published format (instance_id,
// repo, base_commit, patch, test_patch, problem_statement, requirements,
// interface, repo_language) from the instances file of SWE-bench Pro's
// SWE-agent set-up (scaleapi/SWE-bench_Pro-os at 4865082,
// SWE-agent/data/instances.yaml) and the repositories themselves: the 40-hex
// in an id is the upstream fix commit, its first parent the base, and its
// diff split by the language's test-file rule gives patch and test_patch.
// That file's problem_statement holds the requirements and the interface
// after it; they are split into their own columns, as the published rows
// have them.
//
//	go run scripts/pro-dataset.go --instances instances.yaml --repos .repos \
//	  --ids instance_ansible__ansible-f327e65d...,... > pro.jsonl
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

type instance struct {
	InstanceID       string `yaml:"instance_id"`
	BaseCommit       string `yaml:"base_commit"`
	ProblemStatement string `yaml:"problem_statement"`
}

type row struct {
	InstanceID       string `json:"instance_id"`
	Repo             string `json:"repo"`
	BaseCommit       string `json:"base_commit"`
	Patch            string `json:"patch"`
	TestPatch        string `json:"test_patch"`
	ProblemStatement string `json:"problem_statement"`
	Requirements     string `json:"requirements"`
	Interface        string `json:"interface"`
	RepoLanguage     string `json:"repo_language"`
}

// proID is instance_<org>__<repo>-<fix sha>[-v<suffix>].
var proID = regexp.MustCompile(`^instance_([^_].*?)__(.+)-([0-9a-f]{40})(?:-v[0-9a-z]+)?$`)

// testGlobs are the test files of each language, left out of patch and
// put in test_patch.
var testGlobs = map[string][]string{
	"python": {"**/test/**", "**/tests/**", "**/test_*.py", "**/*_test.py", "**/conftest.py"},
	"go":     {"**/*_test.go", "**/testdata/**"},
	"js":     {"**/test/**", "**/tests/**", "**/__tests__/**", "**/spec/**", "**/*.test.*", "**/*.spec.*"},
}

func main() {
	instances := flag.String("instances", "", "SWE-agent/data/instances.yaml of SWE-bench Pro")
	reposDir := flag.String("repos", "", "folder of repositories named owner__name")
	ids := flag.String("ids", "", "comma-separated instance ids (default: every instance whose repository is in --repos)")
	language := flag.String("language", "python", "the rows' language: python, go or js (its test-file rule)")
	flag.Parse()
	globs, ok := testGlobs[*language]
	if *instances == "" || *reposDir == "" || !ok {
		fmt.Fprintln(os.Stderr, "pro-dataset: --instances and --repos are required; --language is python, go or js")
		os.Exit(2)
	}
	data, err := os.ReadFile(*instances)
	if err != nil {
		fail(err)
	}
	var all []instance
	if err := yaml.Unmarshal(data, &all); err != nil {
		fail(fmt.Errorf("%s: %w", *instances, err))
	}
	var want []string
	if *ids != "" {
		want = strings.Split(*ids, ",")
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	found := 0
	for _, in := range all {
		if want != nil && !slices.Contains(want, in.InstanceID) {
			continue
		}
		m := proID.FindStringSubmatch(in.InstanceID)
		if m == nil {
			fail(fmt.Errorf("%s: not a SWE-bench Pro id", in.InstanceID))
		}
		repo, fix := m[1]+"/"+m[2], m[3]
		gitDir := filepath.Join(*reposDir, m[1]+"__"+m[2])
		if _, err := os.Stat(gitDir); err != nil {
			if want != nil {
				fail(fmt.Errorf("%s: no %s", in.InstanceID, gitDir))
			}
			continue
		}
		if base := strings.TrimSpace(git(gitDir, "rev-parse", fix+"^1")); base != in.BaseCommit {
			fail(fmt.Errorf("%s: the fix's parent is %s, the row's base_commit %s", in.InstanceID, base, in.BaseCommit))
		}
		var excludes, includes []string
		for _, g := range globs {
			excludes = append(excludes, ":(exclude,glob)"+g)
			includes = append(includes, ":(glob)"+g)
		}
		ps, req, iface := split(in.ProblemStatement)
		r := row{InstanceID: in.InstanceID, Repo: repo, BaseCommit: in.BaseCommit,
			Patch:            git(gitDir, append([]string{"diff", in.BaseCommit, fix, "--", "."}, excludes...)...),
			TestPatch:        git(gitDir, append([]string{"diff", in.BaseCommit, fix, "--"}, includes...)...),
			ProblemStatement: ps, Requirements: req, Interface: iface, RepoLanguage: *language}
		if err := enc.Encode(r); err != nil {
			fail(err)
		}
		found++
	}
	if want != nil && found != len(want) {
		fail(fmt.Errorf("found %d of the %d ids asked for", found, len(want)))
	}
}

// split cuts the SWE-agent problem statement into the issue text, the
// requirements and the interface.
func split(text string) (problem, requirements, iface string) {
	problem, rest, _ := strings.Cut(text, "\n\nRequirements:\n")
	requirements, iface, _ = strings.Cut(rest, "\n\nNew interfaces introduced:\n")
	return strings.TrimRight(problem, "\n "), strings.TrimSpace(requirements), strings.TrimSpace(iface)
}

func git(dir string, args ...string) string {
	cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, errOut.String()))
	}
	return out.String()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pro-dataset:", err)
	os.Exit(1)
}

//go:build ignore

// history-dataset writes a SWE-bench-style dataset from a repository's own
// history, for benchmarks on real code where the benchmark's rows cannot be
// downloaded. Each fix — a pull-request number, whose merge commit's
// subject ends in "(#N)", or a commit id — gives one row: its first parent
// the base commit, its message the problem statement (the issue a
// benchmark would quote is not in the repository), its diff of the
// language's source files split by the language's test-file rule into
// patch and test_patch (files matching --exclude are left out of both),
// and the language in Multi-SWE-bench's "language" column. The id is
// owner__name-N, with the pull request's number, else the commit's first
// 12 hex digits.
//
//	go run scripts/history-dataset.go --repo pydata/xarray --git .repos/pydata__xarray \
//	  --prs 2905,3095 > dataset.jsonl
//	go run scripts/history-dataset.go --repo google/gson --git .repos/google__gson --language java \
//	  --commits 169bb7a3,b9c70acc > data/java-instances.jsonl
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

type row struct {
	InstanceID       string `json:"instance_id"`
	Repo             string `json:"repo"`
	BaseCommit       string `json:"base_commit"`
	ProblemStatement string `json:"problem_statement"`
	Patch            string `json:"patch"`
	TestPatch        string `json:"test_patch"`
	Language         string `json:"language"`
}

// languages are each language's source files and test files (a2farm's
// IsTest rules; Python's the one the earlier datasets were cut by).
var languages = map[string]struct{ source, tests []string }{
	"python": {[]string{"*.py"}, []string{"*/tests/*"}},
	"java":   {[]string{"*.java"}, []string{"**/test/**", "**/*Test.java", "**/*Tests.java", "**/*IT.java"}},
	"go":     {[]string{"*.go"}, []string{"**/*_test.go", "**/testdata/**"}},
}

var prNumber = regexp.MustCompile(`\(#(\d+)\)\s*$`)

func main() {
	repo := flag.String("repo", "", "owner/name")
	gitDir := flag.String("git", "", "the repository's git folder")
	prs := flag.String("prs", "", "comma-separated pull-request numbers")
	commits := flag.String("commits", "", "instead of --prs: comma-separated fix commits")
	language := flag.String("language", "python", "the rows' language: python, java or go")
	exclude := flag.String("exclude", "doc/*,docs/*", "comma-separated path globs left out of patch and test_patch")
	flag.Parse()
	lang, ok := languages[*language]
	if *repo == "" || *gitDir == "" || (*prs == "") == (*commits == "") || !ok {
		fail(fmt.Errorf("--repo, --git and one of --prs and --commits are required; --language is python, java or go"))
	}
	var fixes []string
	if *prs != "" {
		for _, pr := range strings.Split(*prs, ",") {
			commit := strings.TrimSpace(git(*gitDir, "log", "--format=%H", "-n1", "--grep=(#"+pr+")"))
			if commit == "" {
				fail(fmt.Errorf("no commit merges #%s", pr))
			}
			fixes = append(fixes, commit)
		}
	} else {
		for _, c := range strings.Split(*commits, ",") {
			fixes = append(fixes, strings.TrimSpace(git(*gitDir, "rev-parse", c+"^{commit}")))
		}
	}
	var excludes, tests []string
	for _, g := range strings.Split(*exclude, ",") {
		excludes = append(excludes, ":(exclude,glob)"+g)
	}
	for _, g := range lang.tests {
		tests = append(tests, ":(glob)"+g)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	name := strings.ReplaceAll(*repo, "/", "__")
	for _, fix := range fixes {
		base := strings.TrimSpace(git(*gitDir, "rev-parse", fix+"^1"))
		message := strings.TrimSpace(git(*gitDir, "log", "--format=%B", "-n1", fix))
		subject, _, _ := strings.Cut(message, "\n")
		id := name + "-" + fix[:12]
		if m := prNumber.FindStringSubmatch(subject); m != nil {
			id = name + "-" + m[1]
		}
		patch := append(append([]string{"diff", base, fix, "--"}, lang.source...), excludes...)
		for _, t := range tests {
			patch = append(patch, ":(exclude,"+strings.TrimPrefix(t, ":(")) // :(glob)x → :(exclude,glob)x
		}
		r := row{InstanceID: id, Repo: *repo, BaseCommit: base, ProblemStatement: message, Language: *language,
			Patch:     git(*gitDir, patch...),
			TestPatch: git(*gitDir, append(append([]string{"diff", base, fix, "--"}, tests...), excludes...)...)}
		if strings.TrimSpace(r.Patch) == "" {
			fail(fmt.Errorf("%s (%s) changes no %s source outside tests", id, fix[:12], *language))
		}
		if err := enc.Encode(r); err != nil {
			fail(err)
		}
	}
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
	fmt.Fprintln(os.Stderr, "history-dataset:", err)
	os.Exit(1)
}

//go:build ignore

// history-dataset writes a SWE-bench-style dataset from a repository's own
// history, for benchmarks on real code where the benchmark's rows cannot be
// downloaded: for each pull-request number, the commit that merged it
// ("... (#N)" in its subject) gives the patch (without tests and docs), its
// first parent the base commit, and its message the problem statement.
//
//	go run scripts/history-dataset.go --repo pydata/xarray --git .repos/pydata__xarray \
//	  --prs 2905,3095 > dataset.jsonl
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

type row struct {
	InstanceID       string `json:"instance_id"`
	Repo             string `json:"repo"`
	BaseCommit       string `json:"base_commit"`
	ProblemStatement string `json:"problem_statement"`
	Patch            string `json:"patch"`
}

func main() {
	repo := flag.String("repo", "", "owner/name")
	gitDir := flag.String("git", "", "the repository's git folder")
	prs := flag.String("prs", "", "comma-separated pull-request numbers")
	exclude := flag.String("exclude", "*/tests/*,doc/*,docs/*", "comma-separated path globs left out of the patches")
	flag.Parse()
	if *repo == "" || *gitDir == "" || *prs == "" {
		fmt.Fprintln(os.Stderr, "history-dataset: --repo, --git and --prs are required")
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	name := strings.ReplaceAll(*repo, "/", "__")
	for _, pr := range strings.Split(*prs, ",") {
		commit := strings.TrimSpace(git(*gitDir, "log", "--format=%H", "-n1", "--grep=(#"+pr+")"))
		if commit == "" {
			fmt.Fprintf(os.Stderr, "history-dataset: no commit merges #%s\n", pr)
			os.Exit(1)
		}
		args := []string{"diff", commit + "^1", commit, "--", "*.py"}
		for _, g := range strings.Split(*exclude, ",") {
			args = append(args, ":(exclude,glob)"+g)
		}
		r := row{InstanceID: name + "-" + pr, Repo: *repo, BaseCommit: strings.TrimSpace(git(*gitDir, "rev-parse", commit+"^1")),
			ProblemStatement: strings.TrimSpace(git(*gitDir, "log", "--format=%B", "-n1", commit)), Patch: git(*gitDir, args...)}
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func git(dir string, args ...string) string {
	cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "git %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		os.Exit(1)
	}
	return out.String()
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/gitrepo"
)

// BenchmarkBig (make bench-big REPOS=DIR) measures, as separate processes
// of the real binary, what a new user meets on big repositories: for each
// repository under A2FARM_REPOS (at A2FARM_BENCH_REV, default HEAD), a cold
// full index build into a fresh cache, a second snapshot
// (A2FARM_BENCH_SECOND, default the 2,000th ancestor) with the same cache,
// the first snapshot again from the cache, and one tool call on it —
// beside `git log --name-only` over the same 7,000 commits when git is
// installed. With A2FARM_BENCH_DATASET it also runs localize on that
// dataset (4 samples, --concurrency 4). Wall time and peak RSS come from
// the kernel (getrusage of each child). It fetches nothing.
func BenchmarkBig(b *testing.B) {
	reposDir := os.Getenv("A2FARM_REPOS")
	if os.Getenv("A2FARM_BENCH_BIG") == "" || reposDir == "" {
		b.Skip("set A2FARM_BENCH_BIG=1 and A2FARM_REPOS (make bench-big REPOS=DIR)")
	}
	bin := buildBinary(b)
	rev := envOr("A2FARM_BENCH_REV", "HEAD")
	second := envOr("A2FARM_BENCH_SECOND", "HEAD~2000")
	entries, err := os.ReadDir(reposDir)
	if err != nil {
		b.Fatal(err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| repository | what | wall | peak RSS | note |\n|---|---|---|---|---|\n")
	for range b.N {
		for _, e := range entries {
			name := strings.Replace(strings.TrimSuffix(e.Name(), ".git"), "__", "/", 1)
			if !strings.Contains(name, "/") {
				continue // not an owner__name folder
			}
			repoDir := filepath.Join(reposDir, e.Name())
			r, err := gitrepo.Open(repoDir)
			if err != nil {
				b.Logf("%s: %v (skipped)", e.Name(), err)
				continue
			}
			first, err1 := r.Resolve(rev)
			other, err2 := r.Resolve(second)
			r.Close()
			if err1 != nil {
				b.Logf("%s: %s: %v (skipped)", name, rev, err1)
				continue
			}
			cache := b.TempDir()
			row := func(what string, run measured, note string) {
				fmt.Fprintf(&out, "| %s | %s | %.2f s | %d MB | %s |\n", name, what, run.wall.Seconds(), run.rssKB/1024, note)
			}
			build := func(commit string) (measured, string) {
				return measure(b, bin, "index", "build", "--repos", reposDir, "--repo", name, "--commit", commit, "--cache", cache)
			}
			run, text := build(first)
			row("cold full build "+first[:8], run, phases(text))
			if err2 == nil {
				run, text = build(other)
				row("second snapshot "+other[:8]+", same cache", run, phases(text))
			}
			run, text = build(first)
			row("the first snapshot again (opened)", run, phases(text))
			run, _ = measure(b, bin, "tool", "--repos", reposDir, "--repo", name, "--commit", first, "--cache", cache,
				"--name", "search_code_snippets", "--args", `{"search_terms": ["config parse error"]}`)
			row("one tool call on the cached index", run, "search_code_snippets")
			if gitBin, err := exec.LookPath("git"); err == nil {
				// Without rename detection, as a2farm's history: it would
				// read blobs (and fail on a mirror that lacks the largest).
				run, _ = measure(b, gitBin, "--git-dir", gitDir(repoDir), "log", "--no-renames", "--name-only", "-n", "7000", "--format=%H", first)
				row("`git log --no-renames --name-only -n 7000`", run, "the yardstick for history")
			}
		}
		if ds := os.Getenv("A2FARM_BENCH_DATASET"); ds != "" {
			run, text := measure(b, bin, "localize", "--dataset", ds, "--repos", reposDir, "--cache", b.TempDir(),
				"--policy", "heuristic", "--samples", "4", "--concurrency", "4", "--out", b.TempDir())
			summary := ""
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, " rollouts (") {
					summary = strings.TrimSpace(line)
				}
			}
			fmt.Fprintf(&out, "| %s | localize × 4 samples, --concurrency 4 | %.2f s | %d MB | %s |\n",
				filepath.Base(ds), run.wall.Seconds(), run.rssKB/1024, summary)
		}
	}
	fmt.Fprint(os.Stdout, out.String())
}

// measured is one child process's wall time and peak resident set.
type measured struct {
	wall  time.Duration
	rssKB int64
}

// measure runs a command to completion and returns its cost and output.
// The peak RSS is the child's own VmHWM, polled from /proc while it runs:
// getrusage's maxrss of a child counts the parent's resident set at fork,
// which here is the benchmark's.
func measure(b *testing.B, bin string, args ...string) (measured, string) {
	b.Helper()
	cmd := exec.Command(bin, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	peak := make(chan int64, 1)
	go func() {
		var hwm int64
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			if v := vmHWM(status); v > hwm {
				hwm = v
			}
			select {
			case <-done:
				peak <- hwm
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	m := measured{wall: time.Since(start)}
	close(done)
	m.rssKB = <-peak
	if err != nil {
		b.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, buf.String())
	}
	return m, buf.String()
}

// vmHWM reads a process's peak resident set (kB) from its status file; 0
// once it is gone.
func vmHWM(status string) int64 {
	data, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	return 0
}

// phases condenses index build's timing lines ("  commits  2.1s").
func phases(text string) string {
	var parts []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasSuffix(f[1], "s") && f[0] != "total" {
			if _, err := time.ParseDuration(f[1]); err == nil {
				parts = append(parts, f[0]+" "+f[1])
			}
		}
	}
	return strings.Join(parts, ", ")
}

// gitDir is the git folder of a repository folder, bare or not.
func gitDir(dir string) string {
	if st, err := os.Stat(filepath.Join(dir, ".git")); err == nil && st.IsDir() {
		return filepath.Join(dir, ".git")
	}
	return dir
}

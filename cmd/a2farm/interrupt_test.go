package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
)

// TestInterruptsKeepTheWork sends real signals to the real binary: a
// first Ctrl-C lets running episodes finish and writes everything that
// finished, exit 130; --resume plays exactly the samples that are
// missing; a used --out is refused without it; a second Ctrl-C stops at
// once.
func TestInterruptsKeepTheWork(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "sample", "--out", filepath.Join(dir, "sample")).CombinedOutput(); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	dataset, repos := filepath.Join(dir, "sample", "dataset.jsonl"), filepath.Join(dir, "sample", "repos")
	const instances, samples = 6, 8

	t.Run("localize", func(t *testing.T) {
		srv := policytest.Scripted(t, 60*time.Millisecond) // 3 calls an episode
		out := filepath.Join(t.TempDir(), "loc")
		args := []string{"localize", "--dataset", dataset, "--repos", repos, "--out", out, "--samples", fmt.Sprint(samples),
			"--concurrency", "4", "--policy", "openai", "--model", "m", "--base-url", srv.URL + "/v1"}
		p := start(t, bin, nil, args...)
		waitEpisodes(t, srv, 4)
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		code, elapsed := exitOf(t, p, 30*time.Second)
		if code != exitInterrupted {
			t.Fatalf("localize after Ctrl-C: exit %d, want %d\n%s", code, exitInterrupted, p.out.String())
		}
		_, finished := srv.Episodes()
		rows := locRows(t, filepath.Join(out, "loc_outputs.jsonl"))
		if len(rows) == 0 || len(rows) >= instances*samples || int64(len(rows)) != finished {
			t.Fatalf("after the interrupt loc_outputs.jsonl holds %d rows; the server finished %d episodes (of %d)", len(rows), finished, instances*samples)
		}
		if want := fmt.Sprintf("interrupted; %d of %d samples finished and written to %s", len(rows), instances*samples, out); !strings.Contains(p.out.String(), want) {
			t.Errorf("the interrupt does not say what was kept (%q):\n%s", want, p.out.String())
		}
		t.Logf("interrupted after %s with %d of %d samples written", elapsed.Round(10*time.Millisecond), len(rows), instances*samples)

		// The same command again is refused: it would overwrite the run.
		again := exec.Command(bin, args...)
		if o, err := again.CombinedOutput(); exitStatus(err) != exitUsage || !strings.Contains(string(o), "pass --resume") {
			t.Errorf("a used --out without --resume: %v\n%s", err, o)
		}
		begunBefore, _ := srv.Episodes()
		resumed := exec.Command(bin, append(args, "--resume")...)
		if o, err := resumed.CombinedOutput(); err != nil {
			t.Fatalf("--resume: %v\n%s", err, o)
		}
		begunAfter, _ := srv.Episodes()
		if played := int(begunAfter - begunBefore); played != instances*samples-len(rows) {
			t.Errorf("--resume played %d episodes, want the %d missing", played, instances*samples-len(rows))
		}
		all := locRows(t, filepath.Join(out, "loc_outputs.jsonl"))
		if len(all) != instances*samples {
			t.Errorf("after --resume loc_outputs.jsonl holds %d rows, want %d (each sample once)", len(all), instances*samples)
		}
		trs, err := schema.ReadTrajectoryDir(filepath.Join(out, "trajectories"))
		if err != nil || len(trs) != instances*samples {
			t.Errorf("after --resume %d trajectories (%v), want %d", len(trs), err, instances*samples)
		}
	})

	t.Run("localize stops now at a second Ctrl-C", func(t *testing.T) {
		srv := policytest.Scripted(t, 3*time.Second)
		out := filepath.Join(t.TempDir(), "loc")
		p := start(t, bin, nil, "localize", "--dataset", dataset, "--repos", repos, "--out", out, "--samples", "2",
			"--policy", "openai", "--model", "m", "--base-url", srv.URL+"/v1", "--grace", "5m")
		waitEpisodes(t, srv, 0)
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		time.Sleep(300 * time.Millisecond)
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		code, elapsed := exitOf(t, p, 30*time.Second)
		if code != exitInterrupted || elapsed > 20*time.Second {
			t.Fatalf("after two Ctrl-C: exit %d after %s, want %d at once (grace 5m)\n%s", code, elapsed, exitInterrupted, p.out.String())
		}
		if _, err := os.Stat(filepath.Join(out, "loc_outputs.jsonl")); err != nil {
			t.Errorf("nothing written: %v", err)
		}
	})

	t.Run("up", func(t *testing.T) {
		srv := policytest.Scripted(t, 60*time.Millisecond)
		out := filepath.Join(t.TempDir(), "up")
		args := []string{"up", "--dataset", dataset, "--repos", repos, "--out", out, "--samples", fmt.Sprint(samples), "--workers", "1",
			"--concurrency", "4", "--policy", "openai", "--model", "m", "--base-url", srv.URL + "/v1"}
		p := start(t, bin, nil, args...)
		waitEpisodes(t, srv, 4)
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		code, _ := exitOf(t, p, time.Minute)
		if code != exitInterrupted || !strings.Contains(p.out.String(), "continue with the same command and --resume") {
			t.Fatalf("up after Ctrl-C: exit %d, want %d\n%s", code, exitInterrupted, p.out.String())
		}
		if n := strings.Count(p.out.String(), "redelivery will be taken as a duplicate"); n > 0 {
			t.Errorf("a clean stop warned %d times that archived trajectories would come again:\n%s", n, p.out.String())
		}
		for _, kept := range []string{"report.html", "learner/archive", "up.json"} {
			if _, err := os.Stat(filepath.Join(out, kept)); err != nil {
				t.Errorf("after the interrupt: %v", err)
			}
		}
		if o, err := exec.Command(bin, args...).CombinedOutput(); exitStatus(err) != exitUsage || !strings.Contains(string(o), "pass --resume") {
			t.Errorf("a used --out without --resume: %v\n%s", err, o)
		}
		o, err := exec.Command(bin, append(args, "--resume")...).CombinedOutput()
		if err != nil || !strings.Contains(string(o), fmt.Sprintf("%d trajectories archived", instances*samples)) {
			t.Fatalf("up --resume: %v\n%s", err, o)
		}
	})
}

// waitEpisodes waits until the policy stand-in has finished more than n
// episodes (n = 0: begun one).
func waitEpisodes(t *testing.T, srv *policytest.ScriptedServer, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		begun, finished := srv.Episodes()
		if n == 0 && begun > 0 || n > 0 && finished >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy stand-in saw %d episodes begin and %d finish in a minute", begun, finished)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitOf waits for a started process and returns its exit code and how
// long it took from the call.
func exitOf(t *testing.T, p *proc, limit time.Duration) (int, time.Duration) {
	t.Helper()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return exitStatus(err), time.Since(began)
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		t.Fatalf("no exit within %s\n%s", limit, p.out.String())
		return -1, 0
	}
}

func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// locRows reads loc_outputs.jsonl and fails on a sample written twice.
func locRows(t *testing.T, path string) []schema.LocOutput {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []schema.LocOutput
	seen := map[string]bool{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var row schema.LocOutput
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(row.InstanceID, "/", row.Sample)
		if seen[key] {
			t.Errorf("%s written twice", key)
		}
		seen[key] = true
		rows = append(rows, row)
	}
	return rows
}

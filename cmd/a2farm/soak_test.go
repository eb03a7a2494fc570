package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
)

// TestSoakFaults (make soak; not in CI): 2,000 jobs through three worker
// processes with a worker SIGKILLed (and started again) every 30 s and
// one NATS restart; every job must end archived exactly once, every group
// sharded, and the RSS of the worker that is never killed and of the
// learner must stay flat.
func TestSoakFaults(t *testing.T) {
	if os.Getenv("A2FARM_SOAK") == "" {
		t.Skip("set A2FARM_SOAK=1 (make soak)")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "sample", "--out", filepath.Join(dir, "sample")).CombinedOutput(); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	port := freePort(t)
	common := []string{"--nats", fmt.Sprintf("nats://127.0.0.1:%d", port)}
	natsArgs := []string{"nats", "--port", fmt.Sprint(port), "--store", filepath.Join(dir, "nats"), "--ack-wait", "5s"}
	server := start(t, bin, nil, natsArgs...)
	server.waitFor(t, "nats listening on")
	policy := policytest.Scripted(t, 900*time.Millisecond) // ~2.7 s an episode: the run outlasts the faults
	workerArgs := func(id string) []string {
		return append([]string{"worker", "--repos", filepath.Join(dir, "sample", "repos"), "--base-url", policy.URL + "/v1",
			"--concurrency", "16", "--id", id}, common...)
	}
	steady := start(t, bin, nil, workerArgs("steady")...)
	victims := []*proc{start(t, bin, nil, workerArgs("v1")...), start(t, bin, nil, workerArgs("v2")...)}
	learnerOut := filepath.Join(dir, "learner")
	lrn := start(t, bin, nil, append([]string{"learner", "--out", learnerOut}, common...)...)
	const samples = 334 // × 6 instances = 2,004 jobs
	coord := exec.Command(bin, append([]string{"coordinator", "--dataset", filepath.Join(dir, "sample", "dataset.jsonl"),
		"--repos", filepath.Join(dir, "sample", "repos"), "--run", "soak", "--samples", fmt.Sprint(samples),
		"--policy", "openai", "--model", "m"}, common...)...)
	var coordOut strings.Builder
	coord.Stdout, coord.Stderr = &coordOut, &coordOut
	begin := time.Now()
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()

	type sample struct {
		at             time.Duration
		worker, learnr int64 // KiB
	}
	var rss []sample
	kills, restarted := 0, false
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	timeout := time.After(15 * time.Minute)
wait:
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("coordinator: %v\n%s", err, coordOut.String())
			}
			break wait
		case <-timeout:
			coord.Process.Kill()
			t.Fatalf("the run did not complete\n%s", coordOut.String())
		case <-tick.C:
			el := time.Since(begin)
			rss = append(rss, sample{el, vmRSS(steady.cmd.Process.Pid), vmRSS(lrn.cmd.Process.Pid)})
			if el >= time.Duration(kills+1)*30*time.Second {
				v := victims[kills%len(victims)]
				v.cmd.Process.Signal(syscall.SIGKILL)
				v.cmd.Wait()
				victims[kills%len(victims)] = start(t, bin, nil, workerArgs(fmt.Sprintf("v%d-%d", kills%2+1, kills))...)
				kills++
			}
			if !restarted && el >= 45*time.Second {
				server.cmd.Process.Signal(syscall.SIGKILL)
				server.cmd.Wait()
				time.Sleep(3 * time.Second)
				server = start(t, bin, nil, natsArgs...)
				restarted = true
			}
		}
	}
	answered := time.Since(begin)
	st := exec.Command(bin, append([]string{"status", "--run", "soak", "--until", "sharded", "--watch", "1s", "--json"}, common...)...)
	if out, err := st.CombinedOutput(); err != nil {
		t.Fatalf("status --until sharded: %v\n%s", err, out)
	}
	trs, err := schema.ReadTrajectoryDir(filepath.Join(learnerOut, "archive", "soak", "0", "*"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, failed := map[string]int{}, 0
	for _, tr := range trs {
		jobs[tr.JobID]++
		if tr.Status != schema.StatusOK {
			failed++
		}
	}
	if kills < 3 || !restarted {
		t.Errorf("the run ended before its faults: %d kills, NATS restarted %v", kills, restarted)
	}
	if len(jobs) != 6*samples || len(trs) != 6*samples {
		t.Errorf("%d trajectories of %d distinct jobs archived, want %d", len(trs), len(jobs), 6*samples)
	}
	t.Logf("%d jobs: answered after %.0f s, sharded after %.0f s; %d worker SIGKILLs, NATS restarted %v; %d distinct jobs archived, %d files, %d not ok",
		6*samples, answered.Seconds(), time.Since(begin).Seconds(), kills, restarted, len(jobs), len(trs), failed)
	for _, s := range rss {
		t.Logf("t=%3.0fs  steady worker RSS %6d KiB  learner RSS %6d KiB", s.at.Seconds(), s.worker, s.learnr)
	}
	if n := len(rss); n >= 4 {
		// After warm-up, no more than 20 % growth from the second sample to the last.
		if w0, w1 := rss[1].worker, rss[n-1].worker; w1 > w0*12/10 {
			t.Errorf("the steady worker grew from %d to %d KiB", w0, w1)
		}
	}
}

// vmRSS reads a process's resident set size in KiB (0 when unknown).
func vmRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

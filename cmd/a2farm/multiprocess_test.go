package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
)

// buildBinary compiles a2farm once for the multi-process tests.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "a2farm")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t testing.TB) int { return natstest.FreePort(t) }

// runBin runs the binary to completion and returns its output.
func runBin(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).CombinedOutput()
}

// output collects a process's output; the process writes it from exec's
// copying goroutine while the test reads it.
type output struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

type proc struct {
	cmd *exec.Cmd
	out *output
}

// waitFor waits until the process has printed text, failing the test if
// it exits first or takes longer than a few seconds.
func (p *proc) waitFor(t testing.TB, text string) {
	t.Helper()
	p.waitWithin(t, text, 10*time.Second)
}

// waitWithin is waitFor with its own time limit.
func (p *proc) waitWithin(t testing.TB, text string, limit time.Duration) {
	t.Helper()
	checkfor.Within(t, limit, 20*time.Millisecond, func() error {
		if strings.Contains(p.out.String(), text) {
			return nil
		}
		if p.cmd.ProcessState != nil {
			t.Fatalf("%s exited before printing %q:\n%s", p.cmd.Args[1], text, p.out.String())
		}
		return fmt.Errorf("%s has not printed %q yet:\n%s", p.cmd.Args[1], text, p.out.String())
	})
}

func start(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd, out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
			}
		}
	})
	return p
}

// TestMultiProcessFarmSurvivesAKilledWorker runs nats, a coordinator, two
// workers and a learner as separate processes, kills one worker with
// SIGKILL while it holds jobs, and checks that every job still ends with
// exactly one archived trajectory. It also checks that a wrong password
// is refused.
func TestMultiProcessFarmSurvivesAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "sample", "--out", filepath.Join(dir, "sample")).CombinedOutput(); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	auth := []string{"A2FARM_NATS_USER=farm", "A2FARM_NATS_PASSWORD=s3cret", "A2FARM_LOG_FORMAT=json"}
	// Half-set authentication is refused rather than served open.
	half := exec.Command(bin, "nats", "--port", fmt.Sprint(port), "--store", filepath.Join(dir, "nats-open"))
	half.Env = append(os.Environ(), "A2FARM_NATS_PASSWORD=s3cret", "A2FARM_NATS_USER=")
	if out, err := half.CombinedOutput(); err == nil || !strings.Contains(string(out), "set both A2FARM_NATS_USER and A2FARM_NATS_PASSWORD") {
		t.Errorf("nats with a password and no user: %v\n%s", err, out)
	}
	// The nats command owns the topology: its settings are the farm's.
	start(t, bin, auth, "nats", "--port", fmt.Sprint(port), "--store", filepath.Join(dir, "nats"), "--ack-wait", "3s").
		waitFor(t, "nats listening on")
	common := []string{"--nats", url, "--nats-user", "farm", "--ack-wait", "3s"}

	bad := exec.Command(bin, append([]string{"coordinator", "--dataset", filepath.Join(dir, "sample", "dataset.jsonl"), "--repos", dir, "--run", "r", "--model", "m"}, common...)...)
	bad.Env = append(os.Environ(), "A2FARM_NATS_PASSWORD=wrong")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(strings.ToLower(string(out)), "authorization") {
		t.Errorf("a wrong password was not refused: %v\n%s", err, out)
	}

	// A role whose topology flag disagrees with the farm's refuses to start.
	odd := exec.Command(bin, append([]string{"worker", "--repos", dir, "--max-deliver", "1"}, common...)...)
	odd.Env = append(os.Environ(), auth...)
	if out, err := odd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--max-deliver 1 disagrees with the farm's 3") {
		t.Errorf("a worker with another --max-deliver: %v\n%s", err, out)
	}

	// Each worker has its own policy server, so the test can see what
	// w1 holds when it is killed.
	policy1, policy2 := policytest.Scripted(t, 150*time.Millisecond), policytest.Scripted(t, 150*time.Millisecond)
	workerArgs := func(policy *policytest.ScriptedServer) []string {
		return append([]string{"worker", "--repos", filepath.Join(dir, "sample", "repos"), "--base-url", policy.URL + "/v1",
			"--concurrency", "4", "--grace", "1s"}, common...)
	}
	w1 := start(t, bin, auth, append(workerArgs(policy1), "--id", "w1")...)
	workerMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, bin, auth, append(workerArgs(policy2), "--id", "w2", "--metrics-addr", workerMetrics)...)
	learnerOut := filepath.Join(dir, "learner")
	learnerMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, bin, auth, append([]string{"learner", "--out", learnerOut, "--metrics-addr", learnerMetrics}, common...)...)

	coord := exec.Command(bin, append([]string{"coordinator", "--dataset", filepath.Join(dir, "sample", "dataset.jsonl"),
		"--repos", filepath.Join(dir, "sample", "repos"), "--run", "mp", "--samples", "4", "--policy", "openai", "--model", "m",
		// serving metrics must not keep it from exiting when the run is done
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, common...)...)
	coord.Env = append(os.Environ(), auth...)
	var coordOut strings.Builder
	coord.Stdout, coord.Stderr = &coordOut, &coordOut
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill w1 while it is in the middle of episodes: it has begun some
	// that it has not finished (each takes three policy calls of 150 ms).
	checkfor.Within(t, 30*time.Second, 10*time.Millisecond, func() error {
		if begun, finished := policy1.Episodes(); begun-finished < 2 {
			return fmt.Errorf("w1 has begun %d episodes and finished %d", begun, finished)
		}
		return nil
	})
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w1.cmd.Wait()
	// Counted once w1 is dead: the episodes it held when it was killed.
	begun, finished := policy1.Episodes()
	if begun-finished < 1 {
		t.Fatalf("w1 held no episode when it was killed (begun %d, finished %d)", begun, finished)
	}
	t.Logf("w1 was killed holding %d episodes (%d begun, %d finished)", begun-finished, begun, finished)

	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("coordinator: %v\n%s", err, coordOut.String())
		}
	case <-time.After(120 * time.Second):
		coord.Process.Kill()
		t.Fatalf("the run did not complete\n%s", coordOut.String())
	}

	// The learner archives every job exactly once.
	checkfor.Within(t, 30*time.Second, 100*time.Millisecond, func() error {
		if files, _ := filepath.Glob(filepath.Join(learnerOut, "archive", "mp", "0", "*", "*.arrow")); len(files) != 24 {
			return fmt.Errorf("%d trajectories archived, want 24", len(files))
		}
		return nil
	})
	trs, err := schema.ReadTrajectoryDir(filepath.Join(learnerOut, "archive", "mp", "0", "*"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int{}
	byWorker := map[string]int{}
	for _, tr := range trs {
		jobs[tr.JobID]++
		byWorker[tr.WorkerID]++
		if tr.Status != schema.StatusOK {
			t.Errorf("%s ended %s: %s", tr.JobID, tr.Status, tr.Error)
		}
	}
	if len(jobs) != 24 {
		t.Errorf("%d distinct jobs archived, want 24", len(jobs))
	}
	for id, n := range jobs {
		if n != 1 {
			t.Errorf("job %s archived %d times", id, n)
		}
	}
	t.Logf("trajectories by worker: %v", byWorker)

	// The surviving worker and the learner report on /metrics and /healthz.
	scrape := func(addr, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", addr, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s%s: %d %s", addr, path, resp.StatusCode, body)
		}
		return string(body)
	}
	scrape(workerMetrics, "/healthz")
	// w2 played every episode w1 did not finish. (It may also have played
	// one whose trajectory w1 published just before the kill: that
	// trajectory is deduplicated, but w2 counted its episode.)
	var byW2 int64
	checkfor.Within(t, 10*time.Second, 100*time.Millisecond, func() error {
		_, byW2 = policy2.Episodes()
		m := scrape(workerMetrics, "/metrics")
		for _, want := range []string{
			fmt.Sprintf(`a2farm_episodes_total{status="ok"} %d`, byW2),
			"a2farm_queue_pending 0",
		} {
			if !hasLine(m, want) {
				return fmt.Errorf("worker metrics lack the line %q:\n%s", want, grepLines(m, "a2farm_"))
			}
		}
		// The sample is one snapshot: w2 opened its index once, built by
		// itself or fetched from the farm's store, where w1 shared it.
		built := hasLine(m, `a2farm_index_build_seconds_count{outcome="ok"} 1`)
		fetched := hasLine(m, `a2farm_index_load_seconds_count{from="shared"} 1`)
		if built == fetched {
			return fmt.Errorf("w2 should have built or fetched the one index, once:\n%s", grepLines(m, "a2farm_index"))
		}
		return nil
	})
	if byW2+finished < 24 {
		t.Errorf("w1 finished %d episodes and w2 %d: fewer than the 24 jobs", finished, byW2)
	}
	// Groups close just after their last trajectory is archived.
	checkfor.Within(t, 10*time.Second, 100*time.Millisecond, func() error {
		if m := scrape(learnerMetrics, "/metrics"); !hasLine(m, "a2farm_groups_closed_total 6") {
			return fmt.Errorf("learner metrics lack the line a2farm_groups_closed_total 6:\n%s", grepLines(m, "a2farm_"))
		}
		return nil
	})
}

// hasLine reports whether text has exactly this line.
func hasLine(text, line string) bool {
	for l := range strings.Lines(text) {
		if strings.TrimRight(l, "\n") == line {
			return true
		}
	}
	return false
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// TestMultiProcessFarmSurvivesANATSRestart kills the NATS server (SIGKILL)
// in the middle of a run and starts it again on the same store and port
// three seconds later: the coordinator waits the outage out and exits 0,
// every job is archived exactly once, every group gets its shard (status
// --until sharded), with no role restarted.
func TestMultiProcessFarmSurvivesANATSRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "sample", "--out", filepath.Join(dir, "sample")).CombinedOutput(); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	natsArgs := []string{"nats", "--port", fmt.Sprint(port), "--store", filepath.Join(dir, "nats"), "--ack-wait", "3s"}
	server := start(t, bin, nil, natsArgs...)
	server.waitFor(t, "nats listening on")
	common := []string{"--nats", url}
	policy := policytest.Scripted(t, 100*time.Millisecond)
	start(t, bin, nil, append([]string{"worker", "--repos", filepath.Join(dir, "sample", "repos"), "--base-url", policy.URL + "/v1",
		"--concurrency", "4", "--id", "w1"}, common...)...)
	learnerOut := filepath.Join(dir, "learner")
	start(t, bin, nil, append([]string{"learner", "--out", learnerOut}, common...)...)
	coord := exec.Command(bin, append([]string{"coordinator", "--dataset", filepath.Join(dir, "sample", "dataset.jsonl"),
		"--repos", filepath.Join(dir, "sample", "repos"), "--run", "nr", "--samples", "4", "--policy", "openai", "--model", "m",
		// Every sample forks at turns 1 and 2: the restart also meets
		// plans being made, branches being replayed from the log and
		// groups waiting for their plans.
		"--branches", "1", "--fork-at", "1,2"}, common...)...)
	var coordOut strings.Builder
	coord.Stdout, coord.Stderr = &coordOut, &coordOut
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()

	time.Sleep(1500 * time.Millisecond) // mid-run: each episode takes three 100 ms policy calls
	if err := server.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	server.cmd.Wait()
	killed := time.Now()
	time.Sleep(3 * time.Second)
	start(t, bin, nil, natsArgs...)

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("coordinator: %v\n%s", err, coordOut.String())
		}
	case <-time.After(120 * time.Second):
		coord.Process.Kill()
		t.Fatalf("the run did not complete\n%s", coordOut.String())
	}
	answered := time.Since(killed)
	st := exec.Command(bin, append([]string{"status", "--run", "nr", "--until", "sharded", "--watch", "500ms", "--json"}, common...)...)
	stDone := make(chan []byte, 1)
	go func() { out, _ := st.CombinedOutput(); stDone <- out }()
	select {
	case out := <-stDone:
		if st.ProcessState.ExitCode() != 0 {
			t.Fatalf("status --until sharded: %s", out)
		}
	case <-time.After(60 * time.Second):
		st.Process.Kill()
		t.Fatalf("not every group got its shard after the restart")
	}
	sharded := time.Since(killed)
	trs, err := schema.ReadTrajectoryDir(filepath.Join(learnerOut, "archive", "nr", "0", "*"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int{}
	branches := 0
	for _, tr := range trs {
		jobs[tr.JobID]++
		if tr.Fork.IsBranch() {
			branches++
			if tr.Status != schema.StatusOK || tr.OwnTurns() != int(tr.Fork.Turn) {
				t.Errorf("branch %s: %s, %d turns replayed of %d", tr.JobID, tr.Status, tr.OwnTurns(), tr.Fork.Turn)
			}
		}
	}
	// 24 samples of 3 turns, each forked at turns 1 and 2.
	if len(jobs) != 72 || len(trs) != 72 || branches != 48 {
		t.Errorf("%d trajectories for %d distinct jobs archived (%d branches), want 72, 72 (48)", len(trs), len(jobs), branches)
	}
	shards, _ := filepath.Glob(filepath.Join(learnerOut, "shards", "nr", "0", "*", "manifest.json"))
	if len(shards) != 6 {
		t.Errorf("%d groups sharded, want 6", len(shards))
	}
	t.Logf("NATS killed, back 3 s later: run answered %.1f s and sharded %.1f s after the kill", answered.Seconds(), sharded.Seconds())
}

// TestAsyncIterationsSurviveANATSRestart: a2farm iterate --max-staleness 1
// against a farm of separate processes (NATS, a worker, a learner); the
// NATS server is killed (SIGKILL) while round 3 plays and started again on
// the same store 3 s later. The loop waits the outage out and exits 0;
// every round's jobs are archived exactly once and sharded, by the version
// its report row names.
func TestAsyncIterationsSurviveANATSRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	f := newIterateFixtureAt(t, 100*time.Millisecond)
	dir := t.TempDir()
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	natsArgs := []string{"nats", "--port", fmt.Sprint(port), "--store", filepath.Join(dir, "nats"), "--ack-wait", "3s"}
	server := start(t, bin, nil, natsArgs...)
	server.waitFor(t, "nats listening on")
	start(t, bin, nil, "worker", "--nats", url, "--repos", f.repos, "--base-url", f.a.URL, "--base-url", f.b.URL,
		"--concurrency", "8", "--id", "w1", "--cache", filepath.Join(dir, "cache"))
	learnerOut := filepath.Join(dir, "learner")
	start(t, bin, nil, "learner", "--nats", url, "--out", learnerOut)
	trainer := "mkdir -p {out} && touch {out}/adapter_config.json && sleep 1"
	it := start(t, bin, nil, f.args(trainer, "--iterations", "1", "--max-staleness", "1", "--round-size", "2",
		"--nats", url, "--shards", filepath.Join(learnerOut, "shards"))...)
	it.waitWithin(t, "round 3: rollout with", 90*time.Second)
	if err := server.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	server.cmd.Wait()
	time.Sleep(3 * time.Second)
	start(t, bin, nil, natsArgs...)
	it.waitWithin(t, "3 rounds (1 passes of 3) done", 120*time.Second)
	if err := it.cmd.Wait(); err != nil {
		t.Fatalf("iterate: %v\n%s", err, it.out.String())
	}
	data, err := os.ReadFile(filepath.Join(f.out, "report.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d report rows, want 3", len(lines))
	}
	for r := 1; r <= 3; r++ {
		trs, err := schema.ReadTrajectoryDir(filepath.Join(learnerOut, "archive", "r", fmt.Sprint(r), "*"))
		if err != nil {
			t.Fatal(err)
		}
		jobs := map[string]string{}
		for _, tr := range trs {
			if _, twice := jobs[tr.JobID]; twice {
				t.Errorf("round %d: job %s archived twice", r, tr.JobID)
			}
			jobs[tr.JobID] = tr.Policy.Version
		}
		want := fmt.Sprintf(`"iteration":%d,`, r)
		row := lines[r-1]
		if len(jobs) != 4 || !strings.Contains(row, want) {
			t.Errorf("round %d: %d jobs archived, want 4; row %s", r, len(jobs), row)
		}
		for job, v := range jobs {
			if !strings.Contains(row, fmt.Sprintf(`"acting_version":%s`, strings.TrimPrefix(v, "it"))) {
				t.Errorf("round %d: job %s played by %s, its row says otherwise: %s", r, job, v, row)
			}
		}
		if r == 3 {
			var parsed iterate.Row
			if err := json.Unmarshal([]byte(row), &parsed); err != nil || parsed.Seconds[iterate.StepRollout] < 2.5 {
				t.Errorf("round 3's rollout took %.1f s: it did not meet the 3 s outage (%v)", parsed.Seconds[iterate.StepRollout], err)
			}
		}
		shards, _ := filepath.Glob(filepath.Join(learnerOut, "shards", "r", fmt.Sprint(r), "*", "manifest.json"))
		if len(shards) != 2 {
			t.Errorf("round %d: %d groups sharded, want 2", r, len(shards))
		}
	}
}

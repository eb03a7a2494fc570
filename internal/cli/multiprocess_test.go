package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
)

// buildBinary compiles a2farm once for the multi-process tests.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "a2farm")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/a2farm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int { return natstest.FreePort(t) }

type proc struct {
	cmd *exec.Cmd
	out *strings.Builder
}

func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd, &out}
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
	start(t, bin, auth, "nats", "--port", fmt.Sprint(port), "--store", filepath.Join(dir, "nats"), "--ack-wait", "3s")
	time.Sleep(500 * time.Millisecond)
	common := []string{"--nats", url, "--nats-user", "farm", "--ack-wait", "3s"}

	bad := exec.Command(bin, append([]string{"coordinator", "--dataset", "x", "--repos", dir, "--run", "r", "--model", "m"}, common...)...)
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

	policy := policytest.Scripted(t, 150*time.Millisecond)
	workerArgs := append([]string{"worker", "--repos", filepath.Join(dir, "sample", "repos"), "--base-url", policy.URL + "/v1", "--concurrency", "4", "--grace", "1s"}, common...)
	w1 := start(t, bin, auth, append(workerArgs, "--id", "w1")...)
	workerMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, bin, auth, append(workerArgs, "--id", "w2", "--metrics-addr", workerMetrics)...)
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
	// Kill w1 once it is busy (it logs nothing per job; give it time to
	// take jobs: each episode takes three policy calls of 150 ms).
	time.Sleep(600 * time.Millisecond)
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w1.cmd.Wait()

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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if files, _ := filepath.Glob(filepath.Join(learnerOut, "archive", "mp", "0", "*", "*.arrow")); len(files) == 24 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
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
	// (w2 may also have answered a job w1 had answered just before it was
	// killed: that trajectory is deduplicated, but w2 counted its episode.)
	if m := scrape(workerMetrics, "/metrics"); !strings.Contains(m, `a2farm_episodes_total{status="ok"}`) ||
		!strings.Contains(m, "a2farm_queue_pending 0") || !strings.Contains(m, `a2farm_index_build_seconds_count{outcome="ok"} 1`) {
		t.Errorf("worker metrics lack its episodes, the empty queue or its one index build:\n%s", grepLines(m, "a2farm_"))
	}
	var m string
	for range 50 { // groups close just after their last trajectory is archived
		if m = scrape(learnerMetrics, "/metrics"); strings.Contains(m, "a2farm_groups_closed_total 6") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(m, "a2farm_groups_closed_total 6") {
		t.Errorf("learner metrics lack the 6 closed groups:\n%s", grepLines(m, "a2farm_"))
	}
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
	time.Sleep(500 * time.Millisecond)
	common := []string{"--nats", url}
	policy := policytest.Scripted(t, 100*time.Millisecond)
	start(t, bin, nil, append([]string{"worker", "--repos", filepath.Join(dir, "sample", "repos"), "--base-url", policy.URL + "/v1",
		"--concurrency", "4", "--id", "w1"}, common...)...)
	learnerOut := filepath.Join(dir, "learner")
	start(t, bin, nil, append([]string{"learner", "--out", learnerOut}, common...)...)
	coord := exec.Command(bin, append([]string{"coordinator", "--dataset", filepath.Join(dir, "sample", "dataset.jsonl"),
		"--repos", filepath.Join(dir, "sample", "repos"), "--run", "nr", "--samples", "4", "--policy", "openai", "--model", "m"}, common...)...)
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
	for _, tr := range trs {
		jobs[tr.JobID]++
	}
	if len(jobs) != 24 || len(trs) != 24 {
		t.Errorf("%d trajectories for %d distinct jobs archived, want 24 and 24", len(trs), len(jobs))
	}
	shards, _ := filepath.Glob(filepath.Join(learnerOut, "shards", "nr", "0", "*", "manifest.json"))
	if len(shards) != 6 {
		t.Errorf("%d groups sharded, want 6", len(shards))
	}
	t.Logf("NATS killed, back 3 s later: run answered %.1f s and sharded %.1f s after the kill", answered.Seconds(), sharded.Seconds())
}

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
)

// TestCompatWithReleasedServers runs the multi-process farm (farm init, a
// learner, two workers, a coordinator over the sample) against released
// nats-server binaries: A2FARM_COMPAT_SERVERS names a folder holding
// VERSION/nats-server for each (`make compat` builds them from their Go
// modules), A2FARM_COMPAT_VERSIONS which of them (default: all). A server older than bus.MinServerVersion must be refused by
// every role with one line naming both versions, exit 2; a newer one
// must answer every job once and shard every group. Not in `make test`.
func TestCompatWithReleasedServers(t *testing.T) {
	root := os.Getenv("A2FARM_COMPAT_SERVERS")
	if root == "" {
		t.Skip("A2FARM_COMPAT_SERVERS is not set (make compat)")
	}
	var servers []string
	if versions := strings.Fields(os.Getenv("A2FARM_COMPAT_VERSIONS")); len(versions) > 0 {
		for _, v := range versions {
			servers = append(servers, filepath.Join(root, v, "nats-server"))
		}
	} else {
		servers, _ = filepath.Glob(filepath.Join(root, "*", "nats-server"))
	}
	if len(servers) == 0 {
		t.Fatalf("no VERSION/nats-server under %s", root)
	}
	slices.SortFunc(servers, func(a, b string) int {
		va, vb := filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b))
		switch {
		case va == vb:
			return 0
		case versionLess(va, vb):
			return -1
		}
		return 1
	})
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "sample", "--out", filepath.Join(dir, "sample")).CombinedOutput(); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	var matrix []string
	for _, server := range servers {
		version := filepath.Base(filepath.Dir(server))
		t.Run(version, func(t *testing.T) {
			line := compatRun(t, bin, server, version, filepath.Join(dir, "sample"))
			matrix = append(matrix, line)
		})
	}
	for _, line := range matrix {
		t.Log(line)
	}
}

// versionLess orders release folder names by version.
func versionLess(a, b string) bool {
	var x, y [3]int
	fmt.Sscanf(a, "%d.%d.%d", &x[0], &x[1], &x[2])
	fmt.Sscanf(b, "%d.%d.%d", &y[0], &y[1], &y[2])
	return slices.Compare(x[:], y[:]) < 0
}

// compatRun runs the farm against one server and says how it went.
func compatRun(t *testing.T, bin, server, version, sample string) string {
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	store := t.TempDir()
	nats := exec.Command(server, "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-sd", store)
	var natsOut output
	nats.Stdout, nats.Stderr = &natsOut, &natsOut
	if err := nats.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nats.Process.Kill(); nats.Wait() })
	if err := waitForPort(port, 10*time.Second); err != nil {
		t.Fatalf("nats-server %s: %v\n%s", version, err, natsOut.String())
	}
	common := []string{"--nats", url}
	repos := filepath.Join(sample, "repos")
	old := !versionAtLeastForTest(version, bus.MinServerVersion)
	if old {
		// Every role refuses it the same way, before touching anything.
		for _, args := range [][]string{
			{"farm", "init"},
			{"worker", "--repos", repos},
			{"learner", "--out", t.TempDir()},
			{"coordinator", "--dataset", filepath.Join(sample, "dataset.jsonl"), "--repos", repos, "--run", "c", "--policy", "heuristic"},
			{"status"},
		} {
			cmd := exec.Command(bin, append(args, common...)...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			text := strings.TrimSpace(string(out))
			wantPart := fmt.Sprintf("runs nats-server %s; a2farm needs %s or newer", version, bus.MinServerVersion)
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || strings.Count(text, "\n") != 0 || !strings.Contains(text, wantPart) {
				t.Errorf("%s on nats-server %s: %v, output %q; want exit 2 and one line saying %q", args[0], version, err, text, wantPart)
			}
		}
		return fmt.Sprintf("%s: refused by every role (exit 2)", version)
	}
	began := time.Now()
	if out, err := exec.Command(bin, append([]string{"farm", "init", "--ack-wait", "5s"}, common...)...).CombinedOutput(); err != nil {
		t.Fatalf("farm init on %s: %v\n%s", version, err, out)
	}
	policy := policytest.Scripted(t, 50*time.Millisecond)
	for _, id := range []string{"w1", "w2"} {
		start(t, bin, nil, append([]string{"worker", "--repos", repos, "--base-url", policy.URL + "/v1", "--concurrency", "4", "--id", id}, common...)...)
	}
	learnerOut := filepath.Join(t.TempDir(), "learner")
	start(t, bin, nil, append([]string{"learner", "--out", learnerOut}, common...)...)
	coord := exec.Command(bin, append([]string{"coordinator", "--dataset", filepath.Join(sample, "dataset.jsonl"), "--repos", repos,
		"--run", "compat", "--samples", "4", "--policy", "openai", "--model", "m", "--timeout", "2m"}, common...)...)
	if out, err := coord.CombinedOutput(); err != nil {
		t.Fatalf("coordinator on %s: %v\n%s", version, err, out)
	}
	st := exec.Command(bin, append([]string{"status", "--run", "compat", "--until", "sharded", "--watch", "500ms"}, common...)...)
	if out, err := st.CombinedOutput(); err != nil {
		t.Fatalf("status --until sharded on %s: %v\n%s", version, err, out)
	}
	took := time.Since(began)
	trs, err := schema.ReadTrajectoryDir(filepath.Join(learnerOut, "archive", "compat", "0", "*"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int{}
	for _, tr := range trs {
		jobs[tr.JobID]++
		if tr.Status != schema.StatusOK {
			t.Errorf("%s on %s: %s %s", tr.JobID, version, tr.Status, tr.Error)
		}
	}
	dup := len(trs) - len(jobs)
	shards, _ := filepath.Glob(filepath.Join(learnerOut, "shards", "compat", "0", "*", "manifest.json"))
	if len(jobs) != 24 || dup != 0 || len(shards) != 6 {
		t.Errorf("on %s: %d jobs archived (%d duplicated), %d groups sharded; want 24, 0, 6", version, len(jobs), dup, len(shards))
	}
	return fmt.Sprintf("%s: %d/24 jobs answered once, %d duplicated, %d/6 groups sharded, %.1f s from farm init to the last shard",
		version, len(jobs), dup, len(shards), took.Seconds())
}

// versionAtLeastForTest compares release folder names the way the farm
// compares server versions.
func versionAtLeastForTest(have, want string) bool { return !versionLess(have, want) }

// waitForPort waits until something listens on the loopback port.
func waitForPort(port int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on port %d after %s: %w", port, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

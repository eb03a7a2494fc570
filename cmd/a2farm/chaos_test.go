package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
)

// Chaos settings: a policy call takes chaosTurn (three calls an episode);
// a run is chaosSamples samples of each of the sample's instances; a kill
// comes every chaosEvery to 2×chaosEvery.
const (
	chaosTurn    = 150 * time.Millisecond
	chaosSamples = 16
	chaosEvery   = 3 * time.Second
)

// TestChaosPolicyStandIn is not a test: the chaos test runs the test
// binary with A2FARM_CHAOS_POLICY_ADDR set to serve the scripted policy
// as a process of its own, which it kills and starts again.
func TestChaosPolicyStandIn(t *testing.T) {
	addr := os.Getenv("A2FARM_CHAOS_POLICY_ADDR")
	if addr == "" {
		t.Skip("the chaos test's policy process")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("policy stand-in listening on", addr)
	t.Fatal(http.Serve(ln, policytest.ScriptedHandler(chaosTurn)))
}

// member is one process of the chaos farm, started again after each kill
// with the same command line.
type member struct {
	kind, name string
	cmd        []string
	env        []string
	// ready is what the process prints once it serves ("" for none).
	ready string
	p     *exec.Cmd
	out   *output
	done  chan error
	logs  []*output // every incarnation's output
}

func (m *member) start(t *testing.T) {
	t.Helper()
	m.p = exec.Command(m.cmd[0], m.cmd[1:]...)
	m.p.Env = append(os.Environ(), m.env...)
	m.out = &output{}
	m.logs = append(m.logs, m.out)
	m.p.Stdout, m.p.Stderr = m.out, m.out
	if err := m.p.Start(); err != nil {
		t.Fatal(err)
	}
	m.done = make(chan error, 1)
	go func(p *exec.Cmd, done chan<- error) { done <- p.Wait() }(m.p, m.done)
}

// kill stops the process with SIGKILL and waits for it.
func (m *member) kill() {
	_ = m.p.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// waitReady waits until the process prints its ready line.
func (m *member) waitReady(limit time.Duration) error {
	if m.ready == "" {
		return nil
	}
	deadline := time.Now().Add(limit)
	for !strings.Contains(m.out.String(), m.ready) {
		select {
		case err := <-m.done:
			m.done <- err
			return fmt.Errorf("%s exited before it was ready: %v\n%s", m.name, err, tail(m.out.String(), 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s\n%s", m.name, limit, tail(m.out.String(), 20))
		}
	}
	return nil
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// TestChaos (make chaos; not in CI): a farm of separate processes on a
// 3-node `a2farm nats` cluster — two workers, a learner, a coordinator
// running one run after another, and a policy stand-in — where, for
// A2FARM_CHAOS_FOR, every few seconds one random process is killed with
// SIGKILL and started again. Then every job must have been answered
// exactly once, in the archive, by a trajectory that played to its end,
// and every group sharded exactly once. The last line it prints is the
// chaos line `make chaos` ends with.
func TestChaos(t *testing.T) {
	forText := os.Getenv("A2FARM_CHAOS_FOR")
	if forText == "" {
		t.Skip("set A2FARM_CHAOS_FOR (make chaos)")
	}
	chaosFor, err := time.ParseDuration(forText)
	if err != nil || chaosFor <= 0 {
		t.Fatalf("A2FARM_CHAOS_FOR=%q: want a duration such as 3m", forText)
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "sample", "--out", filepath.Join(dir, "sample")).CombinedOutput(); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	dataset, repos := filepath.Join(dir, "sample", "dataset.jsonl"), filepath.Join(dir, "sample", "repos")

	// The cluster: three `a2farm nats` nodes, everything with 3 replicas.
	var nodes []*member
	ports, routePorts := []int{}, []string{}
	for range 3 {
		ports = append(ports, freePort(t))
		routePorts = append(routePorts, fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(t)))
	}
	var urls []string
	for i := range 3 {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		nodes = append(nodes, &member{kind: "nats", name: fmt.Sprint("nats-", i), ready: "nats listening on",
			cmd: []string{bin, "nats", "--name", fmt.Sprint("n", i), "--port", fmt.Sprint(ports[i]),
				"--store", filepath.Join(dir, fmt.Sprint("nats-", i)), "--cluster", strings.TrimPrefix(routePorts[i], "nats-route://"),
				"--routes", strings.Join(routePorts, ","), "--replicas", "3", "--ack-wait", "5s"}})
	}
	natsURL := strings.Join(urls, ",")
	common := []string{"--nats", natsURL}
	policyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	policy := &member{kind: "policy", name: "policy", ready: "policy stand-in listening",
		cmd: []string{os.Args[0], "-test.run=^TestChaosPolicyStandIn$"}, env: []string{"A2FARM_CHAOS_POLICY_ADDR=" + policyAddr}}
	learnerOut := filepath.Join(dir, "learner")
	lrn := &member{kind: "learner", name: "learner", env: []string{"A2FARM_LOG_FORMAT=json"},
		cmd: append([]string{bin, "learner", "--out", learnerOut, "--takeover-after", "5s"}, common...)}
	var workers []*member
	for i := range 2 {
		workers = append(workers, &member{kind: "worker", name: fmt.Sprint("worker-", i),
			cmd: append([]string{bin, "worker", "--repos", repos, "--base-url", "http://" + policyAddr + "/v1",
				"--concurrency", "4", "--grace", "1s", "--id", fmt.Sprint("w", i)}, common...)})
	}
	coordFor := func(run string) *member {
		return &member{kind: "coordinator", name: "coordinator",
			cmd: append([]string{bin, "coordinator", "--dataset", dataset, "--repos", repos, "--run", run,
				"--samples", fmt.Sprint(chaosSamples), "--policy", "openai", "--model", "m"}, common...)}
	}
	all := append(append(append([]*member{}, nodes...), policy, lrn), workers...)
	defer func() {
		for _, m := range all {
			if m.p != nil && m.p.ProcessState == nil {
				_ = m.p.Process.Signal(syscall.SIGTERM)
				select {
				case <-m.done:
				case <-time.After(10 * time.Second):
					m.kill()
				}
			}
		}
		if t.Failed() {
			for _, m := range all {
				t.Logf("--- %s (last incarnation):\n%s", m.name, tail(m.out.String(), 30))
			}
		}
	}()
	for _, n := range nodes {
		n.start(t)
	}
	for _, n := range nodes {
		if err := n.waitReady(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	policy.start(t)
	if err := policy.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	lrn.start(t)
	for _, w := range workers {
		w.start(t)
	}

	// Runs follow one another until the chaos is over; the last one is
	// let finish.
	var runs []string
	nextRun := func() *member {
		runs = append(runs, fmt.Sprint("chaos-", len(runs)+1))
		c := coordFor(runs[len(runs)-1])
		c.start(t)
		all = append(all, c)
		return c
	}
	kills := map[string]int{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	began := time.Now()
	// A coordinator is also killed within its first second, one start in
	// three — while it reads its run, as a retried Kubernetes Job or a
	// resumed laptop meets it — and started again at once.
	startupKill := func(c *member) {
		if rng.IntN(3) != 0 {
			return
		}
		after := time.Duration(rng.Int64N(int64(time.Second)))
		time.Sleep(after)
		select {
		case err := <-c.done: // it finished already
			c.done <- err
			return
		default:
		}
		c.kill()
		kills["startup"]++
		t.Logf("%5.1fs kill -9 %s %s after its start", time.Since(began).Seconds(), c.name, after.Round(10*time.Millisecond))
		c.start(t)
	}
	coord := nextRun()
	startupKill(coord)
	chaosOver := began.Add(chaosFor)
	nextKill := began.Add(chaosEvery + time.Duration(rng.Int64N(int64(chaosEvery))))
	finalDeadline := chaosOver.Add(10 * time.Minute)
	for {
		select {
		case err := <-coord.done:
			if err != nil {
				t.Fatalf("coordinator of %s: %v\n%s", runs[len(runs)-1], err, tail(coord.out.String(), 30))
			}
			coord.done <- err
			if time.Now().After(chaosOver) {
				goto settle
			}
			coord = nextRun()
			startupKill(coord)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(finalDeadline) {
			t.Fatalf("the last run did not complete within 10 minutes of the chaos' end")
		}
		if time.Now().Before(nextKill) || time.Now().After(chaosOver) {
			continue
		}
		var victim *member
		switch kind := []string{"worker", "learner", "coordinator", "nats", "policy"}[rng.IntN(5)]; kind {
		case "worker":
			victim = workers[rng.IntN(len(workers))]
		case "learner":
			victim = lrn
		case "coordinator":
			victim = coord
		case "nats":
			victim = nodes[rng.IntN(len(nodes))]
		case "policy":
			victim = policy
		}
		down := 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
		if victim.kind == "policy" {
			down = time.Second + time.Duration(rng.Int64N(int64(11*time.Second))) // sometimes past the client's retries
		}
		if victim == coord {
			select {
			case err := <-coord.done: // it had just finished its run
				coord.done <- err
				continue
			default:
			}
		}
		victim.kill()
		kills[victim.kind]++
		t.Logf("%5.1fs kill -9 %s, down %s", time.Since(began).Seconds(), victim.name, down.Round(100*time.Millisecond))
		time.Sleep(down)
		victim.start(t)
		if victim == coord {
			startupKill(coord)
		}
		// One NATS node down at a time: the next kill waits for it.
		if err := victim.waitReady(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		nextKill = time.Now().Add(chaosEvery + time.Duration(rng.Int64N(int64(chaosEvery))))
	}
settle:
	t.Logf("%.0fs: chaos over after %d runs; waiting for every group's shard", time.Since(began).Seconds(), len(runs))
	for _, run := range runs {
		st := exec.Command(bin, append([]string{"status", "--run", run, "--until", "sharded", "--watch", "1s"}, common...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		st = exec.CommandContext(ctx, st.Args[0], st.Args[1:]...)
		out, err := st.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("status --run %s --until sharded: %v\n%s", run, err, tail(string(out), 15))
		}
	}
	res := checkChaos(t, readChaos(t, natsURL, learnerOut, runs), lrn.logs)
	t.Logf("%d runs, %.0f s of chaos, %.0f s in all", len(runs), chaosFor.Seconds(), time.Since(began).Seconds())
	fmt.Printf("chaos: groups %d sharded %d twice %d\n", res.groups, res.sharded, res.shardedTwice)
	fmt.Printf("chaos: jobs %d answered %d duplicated %d lost %d kills worker=%d learner=%d coordinator=%d (at start-up %d) nats=%d policy=%d\n",
		res.jobs, res.answered, res.duplicated, res.lost, kills["worker"], kills["learner"], kills["coordinator"], kills["startup"], kills["nats"], kills["policy"])
	if res.answered != res.jobs || res.duplicated != 0 || res.lost != 0 || res.sharded != res.groups || res.shardedTwice != 0 {
		t.Fail()
	}
}

// chaosResult is what the archive, the log and the learner's logs say.
type chaosResult struct {
	jobs, answered, duplicated, lost int
	groups, sharded, shardedTwice    int
}

// chaosRun is what the farm holds of one run: the jobs its manifest
// expects, the trajectory log's messages per job and the archive.
type chaosRun struct {
	name     string
	expected map[string]bool
	inLog    map[string]int
	archived map[string][]schema.Trajectory
	groups   []string
}

// readChaos reads every run from the cluster and the archive, waiting out
// what a cluster that was just killed and restarted may still answer
// (no responders, a leader being elected) for up to two minutes.
func readChaos(t *testing.T, natsURL, learnerOut string, runs []string) []chaosRun {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := readChaosOnce(natsURL, learnerOut, runs)
		if err == nil {
			return got
		}
		if bus.Permanent(err) || time.Now().After(deadline) {
			t.Fatalf("reading what the farm holds: %v", err)
		}
		t.Logf("reading what the farm holds: %v; trying again", err)
		time.Sleep(time.Second)
	}
}

func readChaosOnce(natsURL, learnerOut string, runs []string) ([]chaosRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	b, err := bus.Attach(ctx, js)
	if err != nil {
		return nil, err
	}
	var out []chaosRun
	for _, run := range runs {
		m, err := b.GetRun(ctx, run, 0)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", run, err)
		}
		inLog, err := logCounts(ctx, js, run)
		if err != nil {
			return nil, fmt.Errorf("run %s: the trajectory log: %w", run, err)
		}
		trs, err := learner.ReadArchive(learnerOut, learner.ArchiveFilter{Run: run})
		if err != nil && !strings.Contains(err.Error(), "no trajectory") {
			return nil, err
		}
		cr := chaosRun{name: run, expected: bus.ExpectedJobs(m), inLog: inLog, archived: map[string][]schema.Trajectory{}, groups: m.Instances}
		for _, tr := range trs {
			cr.archived[tr.JobID] = append(cr.archived[tr.JobID], tr)
		}
		out = append(out, cr)
	}
	return out, nil
}

// checkChaos counts, over the runs: jobs expected (the run manifests),
// answered (one archived trajectory that played to its end: ok), lost (no
// archived trajectory), duplicated (more than one trajectory in the log),
// and groups sharded by the learner's "group written" lines across its
// incarnations.
func checkChaos(t *testing.T, runs []chaosRun, learnerLogs []*output) chaosResult {
	t.Helper()
	written := map[string]int{}
	for _, log := range learnerLogs {
		sc := bufio.NewScanner(strings.NewReader(log.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct{ Message, Run, Instance string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "group written" {
				written[line.Run+"/"+line.Instance]++
			}
		}
	}
	var res chaosResult
	for _, run := range runs {
		res.jobs += len(run.expected)
		for id := range run.expected {
			got := run.archived[id]
			switch {
			case len(got) == 0:
				res.lost++
				t.Errorf("%s: lost (no archived trajectory)", id)
			case len(got) == 1 && got[0].Status == schema.StatusOK && len(got[0].Turns) > 0:
				res.answered++
			default:
				t.Errorf("%s: archived %d times, status %s: %s", id, len(got), got[0].Status, got[0].Error)
			}
			if run.inLog[id] > 1 {
				res.duplicated++
				t.Errorf("%s: %d trajectories in the log", id, run.inLog[id])
			}
		}
		for _, inst := range run.groups {
			res.groups++
			switch n := written[run.name+"/"+inst]; {
			case n == 1:
				res.sharded++
			case n > 1:
				res.sharded++
				res.shardedTwice++
				t.Errorf("group %s/%s written %d times", run.name, inst, n)
			default:
				t.Errorf("group %s/%s never written", run.name, inst)
			}
		}
	}
	return res
}

// logCounts counts the trajectory log's messages per job of a run (by
// the message id a2farm's workers and learner set: the job id, with
// #attempt after the first).
func logCounts(ctx context.Context, js jetstream.JetStream, run string) (map[string]int, error) {
	subject := "a2farm.trajectories." + bus.Token(run) + ".0"
	cons, err := js.OrderedConsumer(ctx, bus.TrajStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject, subject + ".retry"}, HeadersOnly: true})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			id, _, _ := strings.Cut(msg.Headers().Get(jetstream.MsgIDHeader), "#")
			out[id]++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if got == 0 {
			return out, nil
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/policytest"
)

// scaleConfig is BenchmarkScale's shape, from the environment.
type scaleConfig struct {
	workers, concurrency, copies, samples int
	// Each policy call waits a log-normal delay with this median and
	// sigma: a GPU server's per-turn latency, no compute.
	median time.Duration
	sigma  float64
}

func scaleFromEnv() scaleConfig {
	num := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	c := scaleConfig{workers: num("A2FARM_SCALE_WORKERS", 32), concurrency: num("A2FARM_SCALE_CONCURRENCY", 64),
		copies: num("A2FARM_SCALE_COPIES", 512), samples: num("A2FARM_SCALE_SAMPLES", 8),
		median: time.Duration(num("A2FARM_SCALE_TURN_MS", 3000)) * time.Millisecond, sigma: 0.5}
	return c
}

// BenchmarkScale runs a farm wider than one machine's worth of workers on
// loopback: a NATS server, a learner and many worker processes against a
// latency-only policy server (the OpenAI-protocol stand-in, a log-normal
// delay per turn, three turns an episode), on the built-in sample's
// snapshot replicated into many instances. It reports the rollout rate
// against the ideal, dispatch latency, the NATS server's CPU and memory,
// worker memory per episode in flight, and the learner's lag. Run it with
// `make bench-scale`; it skips unless A2FARM_BENCH_SCALE is set.
func BenchmarkScale(b *testing.B) {
	if os.Getenv("A2FARM_BENCH_SCALE") == "" {
		b.Skip("set A2FARM_BENCH_SCALE=1 (make bench-scale): starts dozens of processes")
	}
	cfg := scaleFromEnv()
	for b.Loop() {
		runScale(b, cfg)
	}
}

func runScale(b *testing.B, cfg scaleConfig) {
	bin := buildBinary(b)
	dir := b.TempDir()
	dataset := replicatedSample(b, bin, dir, cfg.copies)
	slots := cfg.workers * cfg.concurrency
	expected := 6 * cfg.copies * cfg.samples

	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	policy := policytest.ScriptedDelays(b, func() time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		return time.Duration(float64(cfg.median) * math.Exp(cfg.sigma*rng.NormFloat64()))
	})

	port := freePort(b)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	server := start(b, bin, nil, "nats", "--port", strconv.Itoa(port), "--store", filepath.Join(dir, "nats"),
		"--max-msg-size", "8388608", "--log-level", "warn")
	server.waitFor(b, "listening")
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bs, err := bus.Attach(ctx, js)
	if err != nil {
		b.Fatal(err)
	}

	learner := start(b, bin, nil, "learner", "--nats", url, "--out", filepath.Join(dir, "learner"), "--log-level", "warn")
	var workers []*proc
	for i := range cfg.workers {
		workers = append(workers, start(b, bin, nil, "worker", "--nats", url, "--repos", filepath.Join(dir, "sample", "repos"),
			"--concurrency", strconv.Itoa(cfg.concurrency), "--id", fmt.Sprintf("w%02d", i), "--base-url", policy.URL+"/v1",
			"--log-level", "warn"))
	}
	waitWorkers(b, bs, cfg.workers)

	// Warm up: every worker opens the snapshot's index (one builds it,
	// the rest fetch it), so that dispatch measures the queue, not a cold
	// index.
	warm := start(b, bin, nil, "coordinator", "--nats", url, "--dataset", filepath.Join(dir, "sample", "dataset.jsonl"),
		"--repos", filepath.Join(dir, "sample", "repos"), "--samples", strconv.Itoa(cfg.workers*cfg.concurrency/6+1),
		"--run", "warm-up", "--model", "m", "--log-level", "warn")
	if err := warm.cmd.Wait(); err != nil {
		b.Fatalf("warm-up run: %v\n%s", err, warm.out)
	}

	// Every job as it is published, and every trajectory as it is stored.
	published := map[string]time.Time{}
	var pubMu sync.Mutex
	sub, err := nc.Subscribe("a2farm.jobs.>", func(m *nats.Msg) {
		var job struct {
			JobID string `json:"job_id"`
		}
		ns, err := strconv.ParseInt(m.Header.Get(bus.PublishedHeader), 10, 64)
		if json.Unmarshal(m.Data, &job) == nil && err == nil {
			pubMu.Lock()
			if _, ok := published[job.JobID]; !ok {
				published[job.JobID] = time.Unix(0, ns)
			}
			pubMu.Unlock()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()

	serverCPU0, _ := procCPU(server.cmd.Process.Pid)
	learnerCPU0, _ := procCPU(learner.cmd.Process.Pid)
	workersCPU0 := workersCPU(workers)
	selfCPU0, _ := procCPU(os.Getpid())
	var idleRSS uint64
	for _, w := range workers {
		idleRSS += procRSS(w.cmd.Process.Pid)
	}
	begin := time.Now()
	coord := start(b, bin, nil, "coordinator", "--nats", url, "--dataset", dataset, "--repos", filepath.Join(dir, "sample", "repos"),
		"--samples", strconv.Itoa(cfg.samples), "--run", "scale", "--model", "m", "--detach", "--log-level", "warn")
	if err := coord.cmd.Wait(); err != nil {
		b.Fatalf("coordinator: %v\n%s", err, coord.out)
	}
	publishedIn := time.Since(begin)

	tr := followTrajectories(b, ctx, js, bs, "scale", expected)
	var serverRSS, workerRSS, maxBacklog uint64
	var activeSamples []int // episodes running by the workers' heartbeats, each second while jobs wait
	sample := func() {
		if hbs, err := bs.LiveWorkers(ctx); err == nil && tr.count() < expected-slots {
			n := 0
			for _, hb := range hbs {
				n += hb.Active
			}
			activeSamples = append(activeSamples, n)
		}
		serverRSS = max(serverRSS, procRSS(server.cmd.Process.Pid))
		var sum uint64
		for _, w := range workers {
			sum += procRSS(w.cmd.Process.Pid)
		}
		workerRSS = max(workerRSS, sum)
		if st, err := bs.Learner(ctx); err == nil {
			maxBacklog = max(maxBacklog, st.Backlog+uint64(st.Unacked))
		}
	}
	deadline := time.Now().Add(30 * time.Minute)
	for tr.count() < expected && time.Now().Before(deadline) {
		sample()
		time.Sleep(time.Second)
	}
	if n := tr.count(); n < expected {
		b.Fatalf("%d of %d trajectories after 30 minutes", n, expected)
	}
	serverCPU1, _ := procCPU(server.cmd.Process.Pid)
	workersCPU1 := workersCPU(workers)
	selfCPU1, _ := procCPU(os.Getpid())
	// The learner's lag: from the last trajectory stored to the last
	// group's shard written.
	groups := 6 * cfg.copies
	for shardedGroups(dir, "scale") < groups && time.Since(tr.last()) < 10*time.Minute {
		sample()
		time.Sleep(200 * time.Millisecond)
	}
	if n := shardedGroups(dir, "scale"); n < groups {
		b.Fatalf("%d of %d groups sharded 10 minutes after the last trajectory\n%s", n, groups, learner.out)
	}
	lag := lastShard(dir, "scale").Sub(tr.last())
	learnerCPU1, _ := procCPU(learner.cmd.Process.Pid)

	trs := tr.all()
	var first, last time.Time
	var episode time.Duration
	var dispatch []time.Duration
	pubMu.Lock()
	firstJobs := sortedByPublish(published)[:min(slots, len(published))]
	for _, t := range trs {
		if first.IsZero() || t.started.Before(first) {
			first = t.started
		}
		if t.finished.After(last) {
			last = t.finished
		}
		episode += t.finished.Sub(t.started)
	}
	byJob := map[string]trajectoryTimes{}
	for _, t := range trs {
		byJob[t.jobID] = t
	}
	for _, id := range firstJobs {
		if t, ok := byJob[id]; ok {
			dispatch = append(dispatch, t.started.Sub(published[id]))
		}
	}
	pubMu.Unlock()
	slices.Sort(dispatch)
	meanEpisode := episode / time.Duration(len(trs))
	// While jobs waited (until the last one started), how many slots
	// were busy on average, and how fast rollouts finished: a farm that
	// idles no slot while jobs wait keeps every slot busy here.
	var lastStart time.Time
	for _, t := range trs {
		if t.started.After(lastStart) {
			lastStart = t.started
		}
	}
	window := lastStart.Sub(first)
	var busy time.Duration
	finishedInWindow := 0
	for _, t := range trs {
		end := t.finished
		if end.After(lastStart) {
			end = lastStart
		}
		busy += max(0, end.Sub(t.started))
		if !t.finished.After(lastStart) {
			finishedInWindow++
		}
	}
	busyShare := busy.Seconds() / window.Seconds() / float64(slots)
	queuedRate := float64(finishedInWindow) / window.Minutes()
	span := last.Sub(first)
	rate := float64(len(trs)) / span.Minutes()
	ideal := float64(slots) / meanEpisode.Minutes()
	idealPolicy := float64(slots) / (3 * cfg.median.Minutes() * math.Exp(cfg.sigma*cfg.sigma/2))
	cpu := (serverCPU1 - serverCPU0).Seconds()
	b.ReportMetric(rate, "rollouts/min")
	b.ReportMetric(rate/ideal, "of-ideal")
	b.ReportMetric(busyShare, "slots-busy-while-queued")
	b.ReportMetric(queuedRate, "rollouts/min-while-queued")
	b.ReportMetric(float64(pct(dispatch, 0.5).Microseconds())/1e3, "dispatch-p50-ms")
	b.ReportMetric(float64(pct(dispatch, 0.99).Microseconds())/1e3, "dispatch-p99-ms")
	b.ReportMetric(cpu/float64(len(trs))*1e3, "nats-cpu-ms/rollout")
	b.ReportMetric(float64(serverRSS)/(1<<20), "nats-peak-MiB")
	b.ReportMetric(float64(workerRSS-min(idleRSS, workerRSS))/float64(slots)/(1<<20), "worker-MiB/episode")
	perRollout := func(d time.Duration) float64 { return d.Seconds() / float64(len(trs)) * 1e3 }
	b.ReportMetric(perRollout(workersCPU1-workersCPU0), "worker-cpu-ms/rollout")
	b.ReportMetric(perRollout(learnerCPU1-learnerCPU0), "learner-cpu-ms/rollout")
	b.ReportMetric(lag.Seconds(), "learner-lag-s")
	b.Logf(`scale: %d workers × %d episodes = %d in flight; %d instances × %d samples = %d rollouts
  published in %s; rollouts %s (first start to last finish)
  rate %.0f rollouts/min; ideal %.0f at the measured mean episode of %s (%.0f at the policy's latency alone): %.3f of ideal
  while jobs waited (first start to last start, %s): %.3f of the slots busy, %.0f rollouts/min; heartbeats: %s running
  dispatch (publish → start, first %d jobs): p50 %s, p99 %s
  NATS server: %.2f CPU-s for the run (%.3f ms per rollout), peak RSS %d MiB
  workers: %.3f ms CPU per rollout; RSS %d MiB summed when idle (%d MiB each), %d MiB at peak: %.2f MiB per episode in flight
  learner: %.3f ms CPU per rollout; peak backlog %d trajectories; last shard %s after the last trajectory
  this process (policy server and the trajectory follower): %.3f ms CPU per rollout`,
		cfg.workers, cfg.concurrency, slots, 6*cfg.copies, cfg.samples, expected,
		publishedIn.Round(time.Millisecond), span.Round(time.Millisecond),
		rate, ideal, meanEpisode.Round(time.Millisecond), idealPolicy, rate/ideal,
		window.Round(time.Millisecond), busyShare, queuedRate, summarize(activeSamples),
		len(dispatch), pct(dispatch, 0.5).Round(time.Microsecond), pct(dispatch, 0.99).Round(time.Microsecond),
		cpu, cpu/float64(len(trs))*1e3, serverRSS>>20,
		perRollout(workersCPU1-workersCPU0), idleRSS>>20, idleRSS>>20/uint64(cfg.workers), workerRSS>>20,
		float64(workerRSS-min(idleRSS, workerRSS))/float64(slots)/(1<<20),
		perRollout(learnerCPU1-learnerCPU0), maxBacklog, lag.Round(time.Millisecond),
		perRollout(selfCPU1-selfCPU0))
}

// replicatedSample writes the built-in sample and a dataset of copies ×
// its six instances (same snapshot, distinct ids): many groups of a
// realistic size on one tiny repository.
func replicatedSample(tb testing.TB, bin, dir string, copies int) string {
	tb.Helper()
	if out, err := runBin(bin, "sample", "--out", filepath.Join(dir, "sample")); err != nil {
		tb.Fatalf("sample: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "sample", "dataset.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			tb.Fatal(err)
		}
		rows = append(rows, row)
	}
	path := filepath.Join(dir, "scale.jsonl")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for c := range copies {
		for _, row := range rows {
			row := row
			copyRow := map[string]any{}
			for k, v := range row {
				copyRow[k] = v
			}
			copyRow["instance_id"] = fmt.Sprintf("%s-c%04d", row["instance_id"], c)
			if err := enc.Encode(copyRow); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return path
}

// waitWorkers waits until n workers heartbeat.
func waitWorkers(tb testing.TB, bs *bus.Bus, n int) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if hbs, err := bs.LiveWorkers(context.Background()); err == nil && len(hbs) >= n {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	tb.Fatalf("fewer than %d workers heartbeat after 2 minutes", n)
}

type trajectoryTimes struct {
	jobID             string
	started, finished time.Time
}

// trajectoryLog follows the trajectory log and keeps every distinct job's
// times.
type trajectoryLog struct {
	mu     sync.Mutex
	seen   map[string]trajectoryTimes
	lastIn time.Time // when the newest distinct trajectory was read
}

func (l *trajectoryLog) last() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastIn
}

func followTrajectories(tb testing.TB, ctx context.Context, js jetstream.JetStream, bs *bus.Bus, run string, expected int) *trajectoryLog {
	tb.Helper()
	l := &trajectoryLog{seen: make(map[string]trajectoryTimes, expected)}
	cons, err := js.OrderedConsumer(ctx, bus.TrajStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"a2farm.trajectories." + run + ".>"}})
	if err != nil {
		tb.Fatal(err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		tr, err := bs.DecodeTrajectory(ctx, msg)
		if err != nil {
			return
		}
		l.mu.Lock()
		if _, dup := l.seen[tr.JobID]; !dup {
			l.seen[tr.JobID] = trajectoryTimes{tr.JobID, tr.StartedAt, tr.FinishedAt}
			l.lastIn = time.Now()
		}
		l.mu.Unlock()
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cc.Stop)
	return l
}

func (l *trajectoryLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *trajectoryLog) all() []trajectoryTimes {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]trajectoryTimes, 0, len(l.seen))
	for _, t := range l.seen {
		out = append(out, t)
	}
	return out
}

func sortedByPublish(published map[string]time.Time) []string {
	ids := make([]string, 0, len(published))
	for id := range published {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return published[a].Compare(published[b]) })
	return ids
}

// shardedGroups counts the learner's shard manifests of a run.
func shardedGroups(dir, run string) int {
	m, _ := filepath.Glob(filepath.Join(dir, "learner", "shards", run, "*", "*", "manifest.json"))
	return len(m)
}

// lastShard is when the run's last shard manifest was written.
func lastShard(dir, run string) time.Time {
	m, _ := filepath.Glob(filepath.Join(dir, "learner", "shards", run, "*", "*", "manifest.json"))
	var last time.Time
	for _, path := range m {
		if info, err := os.Stat(path); err == nil && info.ModTime().After(last) {
			last = info.ModTime()
		}
	}
	return last
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// procCPU is a process's user + system CPU time.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at ")".
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// summarize gives the least, median and greatest of samples.
func summarize(samples []int) string {
	if len(samples) == 0 {
		return "no samples"
	}
	s := slices.Sorted(slices.Values(samples))
	return fmt.Sprintf("min %d, median %d, max %d (%d samples)", s[0], s[len(s)/2], s[len(s)-1], len(s))
}

// workersCPU is the CPU time of every worker process.
func workersCPU(workers []*proc) time.Duration {
	var sum time.Duration
	for _, w := range workers {
		d, _ := procCPU(w.cmd.Process.Pid)
		sum += d
	}
	return sum
}

// procRSS is a process's resident memory.
func procRSS(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

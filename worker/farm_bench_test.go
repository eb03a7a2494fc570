package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/repoindex"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/policy"
)

// farmRun is what one pass of the farm measured.
type farmRun struct {
	wall time.Duration
	cpu  time.Duration // process CPU time over wall
	// dispatch is publish → a worker starts the job, in publish order
	// (later jobs include their wait for a free slot).
	dispatch []time.Duration
	// heapGrowth is the peak heap in use during the run above the heap
	// before it (sampled every 50 ms).
	heapGrowth uint64
}

// benchServer connects to the JetStream server named by A2FARM_BENCH_NATS
// (remote is true: the server, and the learner that would read the
// trajectory log, run elsewhere — scripts/bench-farm-split.sh pins such a
// server to its own core), or starts one in the process.
func benchServer(tb testing.TB) (js jetstream.JetStream, remote bool) {
	url := os.Getenv("A2FARM_BENCH_NATS")
	if url == "" {
		_, js = natstest.New(tb)
		return js, false
	}
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	if js, err = jetstream.New(nc); err != nil {
		tb.Fatal(err)
	}
	return js, true
}

// runFarm publishes the jobs of every instance × samples and runs one
// worker with the given concurrency until every job is done: with the
// server in the process, until the benchmark has read and decoded every
// trajectory from the log (as the learner would, on the same cores); with
// a remote server, until the worker has acknowledged every job, which it
// does only once the trajectory is stored.
func runFarm(tb testing.TB, l *sample.Layout, runID string, samples, concurrency int, pol benchPolicy) farmRun {
	js, remote := benchServer(tb)
	ctx := context.Background()
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	total := len(l.Instances) * samples
	var mu sync.Mutex
	published := map[string]time.Time{}
	started := map[string]time.Duration{}
	var order []string
	acked := make(chan struct{}, total)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Config{Bus: b, Repos: repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: pol.registry, Concurrency: concurrency, WorkerID: "bench",
			Log: zerolog.Nop(), OnJobStarted: func(id string) {
				mu.Lock()
				started[id] = time.Since(published[id])
				mu.Unlock()
			}, OnJobSettled: func(_, outcome string) {
				if outcome == "ack" {
					acked <- struct{}{}
				}
			}})
	}()
	cons, err := js.OrderedConsumer(ctx, bus.TrajStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapInuse
	var peakHeap atomic.Uint64
	sampling := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap.Load() {
					peakHeap.Store(ms.HeapInuse)
				}
			}
		}
	}()
	start, cpuStart := time.Now(), processCPU(tb)
	for _, inst := range l.Instances {
		for s := range int64(samples) {
			job := pol.spec.Job(runID, 0, inst, s)
			mu.Lock()
			published[job.JobID] = time.Now()
			order = append(order, job.JobID)
			mu.Unlock()
			if err := b.PublishJob(ctx, job); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for got := 0; got < total; got++ {
		if remote {
			select {
			case <-acked:
			case <-time.After(30 * time.Second):
				tb.Fatalf("after %d of %d jobs: no acknowledgement for 30 s", got, total)
			}
			continue
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			tb.Fatalf("after %d of %d trajectories: %v", got, total, err)
		}
		if _, err := b.DecodeTrajectory(ctx, msg); err != nil {
			tb.Fatal(err)
		}
	}
	wall, cpu := time.Since(start), processCPU(tb)-cpuStart
	close(sampling)
	stop()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	r := farmRun{wall: wall, cpu: cpu}
	if peak := peakHeap.Load(); peak > baseHeap {
		r.heapGrowth = peak - baseHeap
	}
	for _, id := range order {
		r.dispatch = append(r.dispatch, started[id])
	}
	return r
}

// processCPU is the user + system time the process has used: it shows
// whether a run was bound by the CPU or by waiting.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkFarmVsLocalize runs the same rollouts (built-in sample × 64,
// 8 episodes in flight) through `localize` in one process and through the
// farm (JetStream queue, worker, trajectory log), with two policies: the
// built-in heuristic, whose decisions cost CPU in the worker, and a
// zero-latency policy server (the in-test OpenAI-protocol stand-in
// answering at once), the target's case (docs/ARCHITECTURE.md, Targets). cpu-ms/rollout is the
// whole process's CPU time per rollout: server, encoding and decoding
// included.
func BenchmarkFarmVsLocalize(b *testing.B) {
	l, err := sample.Write(filepath.Join(b.TempDir(), "sample"))
	if err != nil {
		b.Fatal(err)
	}
	const samples, concurrency = 64, 8
	rollouts := float64(len(l.Instances) * samples)
	policies := []struct {
		name   string
		policy func(*testing.B) benchPolicy
	}{
		{"heuristic", heuristicPolicy},
		{"zero-latency-server", func(b *testing.B) benchPolicy { return scriptedPolicy(b, 0) }},
	}
	for _, p := range policies {
		b.Run(p.name+"/localize", func(b *testing.B) {
			pol := p.policy(b)
			repos := gitrepo.NewSet(l.ReposDir)
			defer repos.Close()
			var wall, cpu time.Duration
			for i := range b.N {
				start, cpuStart := time.Now(), processCPU(b)
				if _, err := Localize(context.Background(), LocalizeConfig{Instances: l.Instances, Repos: repos,
					Spec: pol.spec, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: pol.registry, Samples: samples,
					Concurrency: concurrency, Out: filepath.Join(b.TempDir(), fmt.Sprint(i)), Log: zerolog.Nop()}); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(start)
				cpu += processCPU(b) - cpuStart
			}
			b.ReportMetric(rollouts*float64(b.N)/wall.Seconds(), "rollouts/s")
			b.ReportMetric(cpu.Seconds()*1e3/(rollouts*float64(b.N)), "cpu-ms/rollout")
		})
		b.Run(p.name+"/farm", func(b *testing.B) {
			pol := p.policy(b)
			var wall, cpu time.Duration
			for i := range b.N {
				r := runFarm(b, l, fmt.Sprintf("%s-%d-%d", p.name, b.N, i), samples, concurrency, pol)
				wall += r.wall
				cpu += r.cpu
			}
			b.ReportMetric(rollouts*float64(b.N)/wall.Seconds(), "rollouts/s")
			b.ReportMetric(cpu.Seconds()*1e3/(rollouts*float64(b.N)), "cpu-ms/rollout")
		})
	}
}

// benchPolicy is what acts in a benchmark run and the registry that
// serves it.
type benchPolicy struct {
	spec     schema.RunSpec
	registry *policy.Registry
}

func heuristicPolicy(b *testing.B) benchPolicy {
	reg, err := policy.NewRegistry(policy.RegistryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return benchPolicy{spec: schema.RunSpec{Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Seed: 1}, registry: reg}
}

// scriptedPolicy is the openai policy against the in-test OpenAI-protocol
// server answering each call after delay.
func scriptedPolicy(b *testing.B, delay time.Duration) benchPolicy {
	srv := policytest.Scripted(b, delay)
	reg, err := policy.NewRegistry(policy.RegistryConfig{Endpoints: policy.EndpointConfig{BaseURLs: []string{srv.URL + "/v1"}, RequestTimeout: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	return benchPolicy{spec: schema.RunSpec{Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "m"}, Seed: 1}, registry: reg}
}

// BenchmarkFarmEfficiency1sTurn: 512 episodes of three 1-second policy
// calls, 256 in flight on one worker. The ideal wall time is
// ceil(512/256) × 3 s = 6 s; efficiency is ideal / measured. Dispatch
// latency is the time from publishing a job to a worker starting it,
// over the first 256 jobs (those that find a free slot).
func BenchmarkFarmEfficiency1sTurn(b *testing.B) {
	l, err := sample.Write(filepath.Join(b.TempDir(), "sample"))
	if err != nil {
		b.Fatal(err)
	}
	pol := scriptedPolicy(b, time.Second)
	const concurrency = 256
	samples := (512 + len(l.Instances) - 1) / len(l.Instances)
	episodes := samples * len(l.Instances)
	ideal := time.Duration((episodes+concurrency-1)/concurrency) * 3 * time.Second
	var wall time.Duration
	var dispatch []time.Duration
	var heap uint64
	for i := range b.N {
		r := runFarm(b, l, fmt.Sprintf("eff%d-%d", b.N, i), samples, concurrency, pol)
		wall += r.wall
		dispatch = append(dispatch, r.dispatch[:concurrency]...)
		heap = max(heap, r.heapGrowth)
	}
	// An upper bound of a worker's memory per episode in flight: the
	// in-process server and policy stand-in grow with the load too.
	b.ReportMetric(float64(heap)/1024/concurrency, "heap-KiB/episode")
	b.ReportMetric(float64(ideal)*float64(b.N)/float64(wall), "efficiency")
	b.ReportMetric(float64(episodes*b.N)/wall.Seconds(), "rollouts/s")
	b.ReportMetric(float64(quantile(dispatch, 0.5).Microseconds())/1e3, "dispatch-p50-ms")
	b.ReportMetric(float64(quantile(dispatch, 0.99).Microseconds())/1e3, "dispatch-p99-ms")
}

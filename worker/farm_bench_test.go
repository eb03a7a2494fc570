package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/policy"
)

// farmRun is what one pass of the farm measured.
type farmRun struct {
	wall time.Duration
	// dispatch is publish → a worker starts the job, in publish order
	// (later jobs include their wait for a free slot).
	dispatch []time.Duration
}

// runFarm publishes the jobs of every instance × samples, runs one worker
// with the given concurrency and waits until every job has a trajectory
// in the log.
func runFarm(tb testing.TB, l *sample.Layout, runID string, samples, concurrency int, model agent.Model) farmRun {
	_, js := natstest.New(tb)
	ctx := context.Background()
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	var mu sync.Mutex
	published := map[string]time.Time{}
	started := map[string]time.Duration{}
	var order []string
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Config{Bus: b, Repos: repos, Model: model, Concurrency: concurrency, WorkerID: "bench",
			Log: zerolog.Nop(), OnJobStarted: func(id string) {
				mu.Lock()
				started[id] = time.Since(published[id])
				mu.Unlock()
			}})
	}()
	cons, err := js.OrderedConsumer(ctx, bus.TrajStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	total := 0
	for _, inst := range l.Instances {
		for s := range int64(samples) {
			job := schema.Job{JobID: schema.JobID(runID, 0, inst.InstanceID, s), RunID: runID, InstanceID: inst.InstanceID,
				Repo: inst.Repo, BaseCommit: inst.BaseCommit, ProblemStatement: inst.ProblemStatement, Sample: s, Seed: 1,
				Attempt: 1}
			mu.Lock()
			published[job.JobID] = time.Now()
			order = append(order, job.JobID)
			mu.Unlock()
			if err := b.PublishJob(ctx, job); err != nil {
				tb.Fatal(err)
			}
			total++
		}
	}
	for got := 0; got < total; {
		msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			tb.Fatalf("after %d of %d trajectories: %v", got, total, err)
		}
		if _, err := b.DecodeTrajectory(ctx, msg); err != nil {
			tb.Fatal(err)
		}
		got++
	}
	wall := time.Since(start)
	stop()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	r := farmRun{wall: wall}
	for _, id := range order {
		r.dispatch = append(r.dispatch, started[id])
	}
	return r
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkFarmVsLocalize runs the same rollouts (built-in sample × 16,
// heuristic policy, 8 episodes in flight) through `localize` in one
// process and through the farm (JetStream queue, worker, trajectory log).
func BenchmarkFarmVsLocalize(b *testing.B) {
	l, err := sample.Write(filepath.Join(b.TempDir(), "sample"))
	if err != nil {
		b.Fatal(err)
	}
	const samples, concurrency = 16, 8
	rollouts := float64(len(l.Instances) * samples)
	b.Run("localize", func(b *testing.B) {
		repos := gitrepo.NewSet(l.ReposDir)
		defer repos.Close()
		var wall time.Duration
		for i := range b.N {
			start := time.Now()
			if _, err := Localize(context.Background(), LocalizeConfig{Instances: l.Instances, Repos: repos,
				Model: policy.Heuristic{}, Policy: schema.Policy{Kind: "heuristic"}, Samples: samples,
				Concurrency: concurrency, Seed: 1, Out: filepath.Join(b.TempDir(), fmt.Sprint(i)), Log: zerolog.Nop()}); err != nil {
				b.Fatal(err)
			}
			wall += time.Since(start)
		}
		b.ReportMetric(rollouts*float64(b.N)/wall.Seconds(), "rollouts/s")
	})
	b.Run("farm", func(b *testing.B) {
		var wall time.Duration
		for i := range b.N {
			wall += runFarm(b, l, fmt.Sprintf("bench%d", i), samples, concurrency, policy.Heuristic{}).wall
		}
		b.ReportMetric(rollouts*float64(b.N)/wall.Seconds(), "rollouts/s")
	})
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
	srv := policytest.Scripted(b, time.Second)
	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	model, err := policy.NewOpenAI(policy.OpenAIConfig{Client: client, Model: "m"})
	if err != nil {
		b.Fatal(err)
	}
	const concurrency = 256
	samples := (512 + len(l.Instances) - 1) / len(l.Instances)
	episodes := samples * len(l.Instances)
	ideal := time.Duration((episodes+concurrency-1)/concurrency) * 3 * time.Second
	var wall time.Duration
	var dispatch []time.Duration
	for i := range b.N {
		r := runFarm(b, l, fmt.Sprintf("eff%d", i), samples, concurrency, model)
		wall += r.wall
		dispatch = append(dispatch, r.dispatch[:concurrency]...)
	}
	b.ReportMetric(float64(ideal)*float64(b.N)/float64(wall), "efficiency")
	b.ReportMetric(float64(episodes*b.N)/wall.Seconds(), "rollouts/s")
	b.ReportMetric(float64(quantile(dispatch, 0.5).Microseconds())/1e3, "dispatch-p50-ms")
	b.ReportMetric(float64(quantile(dispatch, 0.99).Microseconds())/1e3, "dispatch-p99-ms")
}

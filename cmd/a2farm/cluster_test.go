package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/repoindex"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/policy"
)

// TestClusterLosesANode and TestClusterLosesTheStreamLeader run a farm
// on a 3-node JetStream cluster started from deploy/nats's own
// configuration files (ports rewritten), everything with 3 replicas, and
// stop a node mid-run — any node, then the jobs stream's leader — and
// start it again: every job is archived exactly once and every group
// sharded.
func TestClusterLosesANode(t *testing.T) { testClusterLosesANode(t, false) }

func TestClusterLosesTheStreamLeader(t *testing.T) { testClusterLosesANode(t, true) }

func testClusterLosesANode(t *testing.T, leader bool) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	t.Setenv("NATS_FARM_PASSWORD", "s3cret")
	confs, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "nats", "nats-*.conf"))
	c := natstest.StartCluster(t, confs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, js := c.Connect()
	cfg := bus.DefaultConfig()
	cfg.Replicas, cfg.AckWait = 3, 3*time.Second
	var b *bus.Bus
	checkfor.Within(t, 30*time.Second, 200*time.Millisecond, func() (err error) { // until JetStream has a meta leader
		b, err = bus.Open(ctx, js, cfg)
		return err
	})
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	srv := policytest.Scripted(t, 30*time.Millisecond)
	reg, err := policy.NewRegistry(policy.RegistryConfig{Endpoints: policy.EndpointConfig{BaseURLs: []string{srv.URL + "/v1"}}})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var wg sync.WaitGroup
	var mu sync.Mutex
	closed := map[string]int{}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = worker.Run(ctx, worker.Config{Bus: b, Repos: repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: reg, Concurrency: 8, Grace: time.Second,
				WorkerID: fmt.Sprint("w", i), Log: zerolog.Nop()})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = learner.Serve(ctx, learner.ServiceConfig{Bus: b, Out: out, Learner: learner.DefaultConfig(), Log: zerolog.Nop(),
			OnGroupClosed: func(_ string, _ int64, inst string, _, _ int) { mu.Lock(); closed[inst]++; mu.Unlock() }})
	}()
	defer func() { cancel(); wg.Wait() }()

	spec := schema.RunSpec{Seed: 1, Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "m"}, Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	pub, err := coordinator.Publish(ctx, coordinator.RunConfig{Bus: b, RunID: "cl", Instances: l.Instances, Samples: 16, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	// Mid-run: some episodes finished, most not (96 episodes of three 30 ms
	// policy calls, 16 in flight).
	checkfor.Within(t, 30*time.Second, 10*time.Millisecond, func() error {
		if _, finished := srv.Episodes(); finished < 8 {
			return fmt.Errorf("%d episodes finished", finished)
		}
		return nil
	})
	victim := 1
	if leader {
		if victim = c.StreamLeader(bus.JobsStream); victim < 0 {
			t.Fatal("no jobs stream leader")
		}
	}
	c.Kill(victim)
	killed := time.Now()
	time.Sleep(2 * time.Second)
	c.Start(victim)

	waitCtx, stop := context.WithTimeout(ctx, 90*time.Second)
	defer stop()
	if err := coordinator.Wait(waitCtx, b, pub.Manifest, coordinator.WaitOptions{}); err != nil {
		t.Fatalf("the run did not complete after node %d was stopped: %v", victim, err)
	}
	answered := time.Since(killed)
	checkfor.Within(t, 60*time.Second, 100*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(closed) != len(l.Instances) {
			return fmt.Errorf("%d of %d groups sharded", len(closed), len(l.Instances))
		}
		return nil
	})
	trs, err := schema.ReadTrajectoryDir(filepath.Join(out, "archive", "cl", "0", "*"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int{}
	for _, tr := range trs {
		jobs[tr.JobID]++
	}
	if len(jobs) != pub.Manifest.Expected || len(trs) != pub.Manifest.Expected {
		t.Errorf("%d trajectories of %d distinct jobs archived, want %d", len(trs), len(jobs), pub.Manifest.Expected)
	}
	t.Logf("node %d (leader %v) stopped for 2 s: %d jobs answered %.1f s after, each archived once", victim, leader,
		len(jobs), answered.Seconds())
}

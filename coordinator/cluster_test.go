package coordinator

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

// TestACoordinatorStartedWithoutAJetStreamLeaderWaits: a coordinator
// restarted while the cluster has no leader for the farm's streams and
// buckets (two of three nodes down: no quorum, "no responders" to its
// requests) waits until a node is back and then completes, as a farm
// operator expects of a coordinator restarted at any moment.
func TestACoordinatorStartedWithoutAJetStreamLeaderWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	t.Setenv("NATS_FARM_PASSWORD", "s3cret")
	confs, _ := filepath.Glob(filepath.Join("..", "deploy", "nats", "nats-*.conf"))
	c := natstest.StartCluster(t, confs...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, js := c.Connect()
	cfg := bus.DefaultConfig()
	cfg.Replicas = 3
	var b *bus.Bus
	checkfor.Within(t, 60*time.Second, 200*time.Millisecond, func() (err error) { // until JetStream has a meta leader
		openCtx, done := context.WithTimeout(ctx, 5*time.Second)
		defer done()
		b, err = bus.Open(openCtx, js, cfg)
		return err
	})
	run := RunConfig{Bus: b, RunID: "q", Samples: 2, Instances: []schema.Instance{
		{InstanceID: "o__r-1", Repo: "o/r", BaseCommit: "abc"}, {InstanceID: "o__r-2", Repo: "o/r", BaseCommit: "abc"}},
		Spec: schema.RunSpec{Policy: schema.Policy{Kind: "heuristic"}}}
	if _, err := Publish(ctx, run); err != nil {
		t.Fatal(err)
	}

	c.Kill(1)
	c.Kill(2)
	back := make(chan time.Time, 1)
	go func() {
		time.Sleep(3 * time.Second)
		c.Start(1)
		back <- time.Now()
	}()
	pub, err := Publish(ctx, run) // the coordinator, started again
	if err != nil {
		t.Fatalf("a coordinator started while the cluster had no leader: %v", err)
	}
	started := <-back
	if pub.Manifest.Expected != 4 || pub.Manifest.Attempt != 1 {
		t.Errorf("published %+v, want the run's 4 jobs, attempt 1", pub.Manifest)
	}
	t.Logf("waited until %.1f s after a node was back", time.Since(started).Seconds())
}

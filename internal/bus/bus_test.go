package bus

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

func open(t *testing.T, cfg Config) (*Bus, jetstream.JetStream) {
	t.Helper()
	_, js := natstest.New(t)
	b, err := Open(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, js
}

func TestOpenIsIdempotentAndApplySettings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AckWait, cfg.MaxDeliver = 45*time.Second, 5
	b, js := open(t, cfg)
	if _, err := Open(context.Background(), js, cfg); err != nil {
		t.Fatalf("second Open: %v", err)
	}
	ctx := context.Background()
	info, err := b.Jobs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Duplicates != time.Hour {
		t.Errorf("jobs stream config = %+v", info.Config)
	}
	ci, err := b.Consumer.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.AckWait != 45*time.Second || ci.Config.MaxDeliver != 5 || ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("consumer config = %+v", ci.Config)
	}
	if st, err := b.Workers.Status(ctx); err != nil || st.TTL() != 30*time.Second {
		t.Errorf("workers bucket TTL = %v, %v", st, err)
	}
	for _, bad := range []func(*Config){func(c *Config) { c.Replicas = 0 }, func(c *Config) { c.MaxMsgSize = 10 },
		func(c *Config) { c.DedupWindow = time.Second }, func(c *Config) { c.MaxDeliver = 0 }} {
		c := DefaultConfig()
		bad(&c)
		if _, err := Open(ctx, js, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestJobsAreDeduplicatedByID(t *testing.T) {
	b, _ := open(t, DefaultConfig())
	ctx := context.Background()
	job := schema.Job{JobID: schema.JobID("run.1", 0, "o__r-1", 0), RunID: "run.1", InstanceID: "o__r-1"}
	for range 3 {
		if err := b.PublishJob(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	job2 := job
	job2.JobID, job2.Sample = schema.JobID("run.1", 0, "o__r-1", 1), 1
	if err := b.PublishJob(ctx, job2); err != nil {
		t.Fatal(err)
	}
	pending, inFlight, err := b.QueueDepth(ctx)
	if err != nil || pending != 2 || inFlight != 0 {
		t.Fatalf("queue depth %d+%d, %v; want 2 jobs", pending, inFlight, err)
	}
	batch, err := b.Consumer.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		got, err := DecodeJob(msg)
		if err != nil || got.JobID != job.JobID {
			t.Errorf("job = %+v, %v", got, err)
		}
	}
	if _, inFlight, _ = b.QueueDepth(ctx); inFlight != 1 {
		t.Errorf("in flight = %d after a fetch without ack", inFlight)
	}
}

func TestTrajectoriesInlineAndOffloaded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxMsgSize = 64 << 10
	b, js := open(t, cfg)
	ctx := context.Background()
	small := schema.Trajectory{JobID: "r/0/a/0", RunID: "r", InstanceID: "a", Status: schema.StatusOK,
		Turns: []schema.Turn{{Index: 0, ToolName: "finish", ActionKey: "finish{}"}}}
	big := small
	big.JobID = "r/0/a/1"
	// incompressible text, so that the zstd payload stays above the limit
	rng := rand.New(rand.NewPCG(1, 2))
	var obs strings.Builder
	for range 300_000 {
		obs.WriteByte(byte('a' + rng.IntN(26)))
	}
	big.Turns = []schema.Turn{{Index: 0, ToolName: "search", Observation: obs.String()}}
	for _, tr := range []schema.Trajectory{small, big, small} { // the repeat is deduplicated
		if err := b.PublishTrajectory(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	info, err := b.Traj.Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("trajectory log holds %v messages (%v); want 2", info.State.Msgs, err)
	}
	cons, err := js.OrderedConsumer(ctx, TrajStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []schema.Trajectory
	for range 2 {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := b.DecodeTrajectory(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tr)
	}
	if !reflect.DeepEqual(got[0].Turns, small.Turns) || got[1].Turns[0].Observation != big.Turns[0].Observation {
		t.Error("trajectories changed on the way through the bus")
	}
	if objs, err := b.Payloads.List(ctx); err != nil || len(objs) != 1 {
		t.Errorf("object store holds %d payloads (%v); want the big one", len(objs), err)
	}
}

package bus

import (
	"context"
	"fmt"
	"github.com/a2farm/a2farm/internal/checkfor"
	"math/rand/v2"
	"reflect"
	"strconv"
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

// waitPending waits until the jobs consumer counts want undelivered jobs:
// the server updates the count a moment after acknowledging a publish.
func waitPending(t *testing.T, b *Bus, want uint64) {
	t.Helper()
	checkfor.Within(t, 5*time.Second, 10*time.Millisecond, func() error {
		q, err := b.Queue(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if q.Pending != want {
			return fmt.Errorf("pending jobs = %d; want %d", q.Pending, want)
		}
		return nil
	})
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
	if ci.Config.AckWait != 45*time.Second || ci.Config.MaxDeliver != 5 || ci.Config.AckPolicy != jetstream.AckExplicitPolicy ||
		ci.Config.MaxAckPending != 100_000 {
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

// TestMaxInFlightBoundsDeliveries: the workers' consumer hands out at
// most MaxInFlight unacknowledged jobs, whatever the pulls ask for — so
// the bound must exceed the farm's slots (the server's own default, 1,000,
// idled half of a 2,048-episode farm).
func TestMaxInFlightBoundsDeliveries(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInFlight = 3
	b, _ := open(t, cfg)
	ctx := context.Background()
	for s := range int64(5) {
		if err := b.PublishJob(ctx, schema.Job{JobID: schema.JobID("r", 0, "o__r-1", s), RunID: "r", InstanceID: "o__r-1", Sample: s}); err != nil {
			t.Fatal(err)
		}
	}
	waitPending(t, b, 5)
	batch, err := b.Consumer.Fetch(5, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++
	}
	if got != 3 {
		t.Errorf("a pull for 5 got %d jobs, want MaxInFlight = 3", got)
	}
	if a, err := Attach(ctx, b.js); err != nil || a.Config().MaxInFlight != 3 {
		t.Errorf("attached config: %+v, %v; want max in flight 3 read back", a.Config(), err)
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
	waitPending(t, b, 2)
	if _, inFlight, err := b.QueueDepth(ctx); err != nil || inFlight != 0 {
		t.Fatalf("%d in flight, %v; want none", inFlight, err)
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
		// The first publish's time rides along, for queue-wait measures.
		ns, err := strconv.ParseInt(msg.Headers().Get(PublishedHeader), 10, 64)
		if age := time.Since(time.Unix(0, ns)); err != nil || age < 0 || age > time.Minute {
			t.Errorf("published header %q: %v, %s old", msg.Headers().Get(PublishedHeader), err, age)
		}
	}
	if _, inFlight, _ := b.QueueDepth(ctx); inFlight != 1 {
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

// TestDeadJobsBecomeInfraErrors: a job that fails every delivery is turned
// into an infra_error trajectory and a dead letter, and leaves the queue.
func TestDeadJobsBecomeInfraErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AckWait, cfg.MaxDeliver = time.Second, 2
	b, _ := open(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	job := schema.Job{JobID: "r/0/i/0", RunID: "r", InstanceID: "i", Attempt: 1}
	if err := b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	dead := make(chan DeadLetter, 1)
	go b.HandleDeadJobs(ctx, func(dl DeadLetter) { dead <- dl }, nil)
	for range 2 { // two failed deliveries
		batch, err := b.Consumer.Fetch(1, jetstream.FetchMaxWait(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			msg.Nak()
		}
	}
	// The server announces the exhausted job when it next looks for work
	// to deliver, as a polling worker makes it do.
	if batch, err := b.Consumer.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond)); err == nil {
		for range batch.Messages() {
			t.Error("a job was delivered past MaxDeliver")
		}
	}
	select {
	case dl := <-dead:
		if dl.Job.JobID != job.JobID || dl.Deliveries != 2 {
			t.Errorf("dead letter = %+v", dl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter")
	}
	letters, err := b.DeadLetters(ctx, "r")
	if err != nil || len(letters) != 1 {
		t.Fatalf("dead letters = %+v, %v", letters, err)
	}
	if pending, inFlight, _ := b.QueueDepth(ctx); pending+inFlight != 0 {
		t.Errorf("the dead job is still queued (%d+%d)", pending, inFlight)
	}
	cons, _ := b.Traj.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	msg, err := cons.Next(jetstream.FetchMaxWait(3 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := b.DecodeTrajectory(ctx, msg)
	if err != nil || tr.Status != schema.StatusInfraError || tr.JobID != job.JobID {
		t.Errorf("trajectory = %+v, %v", tr, err)
	}
	// A retry is queued again despite the dedup window.
	job.Attempt = 2
	if err := b.PublishJobAttempt(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitPending(t, b, 1)
}

// TestAttachReadsTheFarmsSettings: Attach finds the topology Open made and
// reports its settings instead of imposing defaults.
func TestAttachReadsTheFarmsSettings(t *testing.T) {
	_, js := natstest.New(t)
	if _, err := Attach(context.Background(), js); err == nil {
		t.Fatal("Attach succeeded on a server without a topology")
	}
	cfg := DefaultConfig()
	cfg.AckWait, cfg.MaxDeliver, cfg.HeartbeatTTL = 45*time.Second, 5, 10*time.Second
	if _, err := Open(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := Attach(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	if b.cfg != cfg {
		t.Errorf("attached settings %+v, want %+v", b.cfg, cfg)
	}
}

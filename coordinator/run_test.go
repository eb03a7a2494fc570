package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

func testRun(t *testing.T) (context.Context, jetstream.JetStream, *bus.Bus, RunConfig) {
	t.Helper()
	_, js := natstest.New(t)
	ctx := context.Background()
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Bus: b, RunID: "r", Samples: 2, Instances: []schema.Instance{
		{InstanceID: "o__r-1", Repo: "o/r", BaseCommit: "abc"}, {InstanceID: "o__r-2", Repo: "o/r", BaseCommit: "abc"}},
		Spec: schema.RunSpec{Policy: schema.Policy{Kind: "heuristic"}}}
	return ctx, js, b, cfg
}

func answer(t *testing.T, ctx context.Context, b *bus.Bus, job schema.Job) {
	t.Helper()
	if err := b.PublishTrajectory(ctx, schema.Trajectory{JobID: job.JobID, RunID: job.RunID, InstanceID: job.InstanceID,
		Sample: job.Sample, Status: schema.StatusOK, Attempt: job.Attempt}); err != nil {
		t.Fatal(err)
	}
}

// TestRunsAreCountedByJobID: messages on a run's trajectory subject that
// a2farm did not publish for one of its jobs count nowhere, a job
// answered twice counts once, and the run completes exactly when every
// job has a trajectory.
func TestRunsAreCountedByJobID(t *testing.T) {
	ctx, js, b, cfg := testRun(t)
	pub, err := Publish(ctx, cfg)
	if err != nil || pub.Queued != 4 || pub.Manifest.Attempt != 1 {
		t.Fatalf("publish: %+v, %v", pub, err)
	}
	subject := "a2farm.trajectories.r.0"
	for _, m := range []*nats.Msg{
		{Subject: subject, Data: []byte("garbage")},
		{Subject: subject, Data: []byte("more garbage"), Header: nats.Header{jetstream.MsgIDHeader: {"x"}}},
		{Subject: subject + ".retry", Data: []byte("{}"), Header: nats.Header{jetstream.MsgIDHeader: {"other/0/x/0"}, "A2farm-Encoding": {"zstd"}}},
	} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	jobs := []schema.Job{}
	for _, in := range cfg.Instances {
		for s := range int64(2) {
			jobs = append(jobs, cfg.Spec.Job("r", 0, in, s))
		}
	}
	for _, j := range jobs[1:] {
		answer(t, ctx, b, j)
	}
	retry := jobs[1]
	retry.Attempt = 2
	answer(t, ctx, b, retry) // a second attempt of an answered job

	if n, _, err := Accounted(ctx, b, pub.Manifest); err != nil || n != 3 {
		t.Errorf("status counts %d (%v), want 3", n, err)
	}
	// A message with an expected job's id and a2farm's headers but no
	// trajectory inside: status, which trusts message ids, would count it
	// until the learner moves it to the dead letters; the coordinator,
	// which decodes, never does.
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte("not arrow"),
		Header: nats.Header{jetstream.MsgIDHeader: {"r/0/o__r-1/0#9"}, "A2farm-Encoding": {"zstd"}}}); err != nil {
		t.Fatal(err)
	}
	var rejected []string
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var last int
	err = Wait(waitCtx, b, pub.Manifest, WaitOptions{Progress: func(done, _ int) { last = done },
		Rejected: func(_ uint64, why string) { rejected = append(rejected, why) }, OnError: func(err error) { t.Error(err) }})
	if !errors.Is(err, context.DeadlineExceeded) || last != 3 {
		t.Fatalf("with 3 of 4 jobs answered: wait returned %v at %d", err, last)
	}
	if len(rejected) != 4 {
		t.Errorf("rejected %d messages, want the 4 foreign ones: %q", len(rejected), rejected)
	}
	answer(t, ctx, b, jobs[0])
	if err := Wait(ctx, b, pub.Manifest, WaitOptions{OnError: func(err error) { t.Error(err) }}); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := Accounted(ctx, b, pub.Manifest); n != 4 {
		t.Errorf("status counts %d, want 4", n)
	}
}

// TestPublishingARunAgain: a finished run publishes nothing and says so,
// an unfinished one publishes only its missing jobs, and --rerun makes a
// new attempt of every job.
func TestPublishingARunAgain(t *testing.T) {
	ctx, _, b, cfg := testRun(t)
	first, err := Publish(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := b.Consumer, error(nil)
	drain := func() []schema.Job {
		var out []schema.Job
		batch, err := cons.Fetch(10, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			job, err := bus.DecodeJob(msg)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, job)
			if len(out) <= 3 || job.Attempt > 1 {
				_ = msg.Ack()
			} // else: still in flight when the run is published again
		}
		return out
	}
	jobs := drain()
	for _, j := range jobs[:3] {
		answer(t, ctx, b, j)
	}
	again, err := Publish(ctx, cfg)
	if err != nil || again.Complete || again.Answered != 3 || again.Queued != 1 {
		t.Fatalf("an unfinished run published again: %+v, %v", again, err)
	}
	// The missing job is still in flight: publishing it again under its
	// id stored nothing twice.
	if got := drain(); len(got) != 0 {
		t.Errorf("queued %+v again while it was in flight", got)
	}
	if pending, inFlight, err := b.QueueDepth(ctx); err != nil || pending != 0 || inFlight != 1 {
		t.Errorf("queue %d pending + %d in flight (%v), want the one job in flight", pending, inFlight, err)
	}
	answer(t, ctx, b, jobs[3])
	done, err := Publish(ctx, cfg)
	if err != nil || !done.Complete || done.Queued != 0 {
		t.Fatalf("a finished run published again: %+v, %v", done, err)
	}
	cfg.Rerun = true
	rerun, err := Publish(ctx, cfg)
	if err != nil || rerun.Queued != 4 || rerun.Manifest.Attempt != 2 || !rerun.Manifest.Created.Equal(first.Manifest.Created) {
		t.Fatalf("rerun: %+v, %v", rerun, err)
	}
	reran := drain()
	if len(reran) != 4 {
		t.Errorf("rerun queued %d jobs, want 4", len(reran))
	}
	for _, j := range reran {
		if j.Attempt != 2 {
			t.Errorf("rerun job %s is attempt %d, want 2", j.JobID, j.Attempt)
		}
	}
	cfg.Rerun, cfg.Samples = false, 3
	if _, err := Publish(ctx, cfg); err == nil {
		t.Error("a run published again with other samples was accepted")
	}
	if err := b.PublishJob(ctx, schema.Job{JobID: "x"}); err == nil {
		t.Error("a job without a run id was published")
	}
}

// TestOversizedRunsPublishNothing: a job too large for a message is
// refused before any job of the run is published.
func TestOversizedRunsPublishNothing(t *testing.T) {
	ctx, _, b, cfg := testRun(t)
	cfg.Instances[1].ProblemStatement = strings.Repeat("x", int(b.MaxPayload())+1)
	if _, err := Publish(ctx, cfg); err == nil || !strings.Contains(err.Error(), "instance o__r-2") {
		t.Fatalf("an oversized job was accepted: %v", err)
	}
	if pending, _, err := b.QueueDepth(ctx); err != nil || pending != 0 {
		t.Errorf("%d jobs queued (%v), want none", pending, err)
	}
	if _, err := b.GetRun(ctx, "r", 0); err == nil {
		t.Error("the run's manifest was stored")
	}
}

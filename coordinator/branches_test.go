package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/schema"
)

// played answers a job with a trajectory of the given status and turns.
func played(t *testing.T, ctx context.Context, b *bus.Bus, job schema.Job, status schema.Status, turns int) {
	t.Helper()
	tr := job.Trajectory(status)
	for i := range turns {
		tr.Turns = append(tr.Turns, schema.Turn{Index: int64(i), ActionKey: "a"})
	}
	if err := b.PublishTrajectory(ctx, tr); err != nil {
		t.Fatal(err)
	}
}

// queued reads the jobs waiting in the queue, by job id.
func queued(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string]schema.Job {
	t.Helper()
	s, err := js.Stream(ctx, bus.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]schema.Job{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // removed
		}
		var job schema.Job
		if err := json.Unmarshal(raw.Data, &job); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[job.JobID]; dup {
			t.Errorf("job %s is queued twice", job.JobID)
		}
		out[job.JobID] = job
	}
	return out
}

// TestBranchesArePlannedOnceAndPublishedExactlyOnce: a run that branches
// publishes an instance's branches once its base samples are in, only of
// the parents that played to their end, after storing the plan; a
// coordinator that stops between the plan and its publication republishes
// it when it comes back (the jobs are queued once), never plans again, and
// the run completes exactly when every base job and branch is answered.
func TestBranchesArePlannedOnceAndPublishedExactlyOnce(t *testing.T) {
	ctx, js, b, cfg := testRun(t)
	cfg.Spec.Branching = schema.Branching{Branches: 2, ForkAt: []int64{1, 2}}
	pub, err := Publish(ctx, cfg)
	if err != nil || pub.Queued != 4 {
		t.Fatalf("publish: %+v, %v", pub, err)
	}
	m := pub.Manifest
	if err := Wait(ctx, b, m, WaitOptions{}); err == nil {
		t.Fatal("waiting on a run that branches without its dataset rows was accepted")
	}
	in1, in2 := cfg.Instances[0], cfg.Instances[1]
	// Instance 1: sample 0 plays 3 turns (forks at 1 and 2), sample 1
	// fails. Instance 2: sample 0 plays 2 turns (forks at 1 only), sample
	// 1 is still out.
	played(t, ctx, b, cfg.Spec.Job("r", 0, in1, 0), schema.StatusOK, 3)
	played(t, ctx, b, cfg.Spec.Job("r", 0, in1, 1), schema.StatusPolicyError, 3)
	played(t, ctx, b, cfg.Spec.Job("r", 0, in2, 0), schema.StatusTruncated, 2)
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if err := Wait(short, b, m, WaitOptions{Instances: cfg.Instances}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait returned %v before the run was complete", err)
	}
	plans, err := b.ForkPlans(ctx, "r", 0)
	if err != nil || len(plans) != 1 {
		t.Fatalf("fork plans %v (%v): want instance 1's only (instance 2 misses a sample)", plans, err)
	}
	var want []string
	for _, j := range plans[in1.InstanceID].Jobs {
		want = append(want, j.JobID)
		if j.Fork.ParentJobID != "r/0/o__r-1/0" || j.Fork.LogSeq == 0 {
			t.Errorf("branch %s forks %s at log message %d: want the ok parent r/0/o__r-1/0, located", j.JobID, j.Fork.ParentJobID, j.Fork.LogSeq)
		}
	}
	if !slices.Equal(want, []string{"r/0/o__r-1/2", "r/0/o__r-1/3", "r/0/o__r-1/4", "r/0/o__r-1/5"}) {
		t.Errorf("instance 1's branches %v: want 2 at turn 1 and 2 at turn 2 of sample 0", want)
	}
	jobs := queued(t, ctx, js)
	for _, id := range want {
		if _, ok := jobs[id]; !ok {
			t.Errorf("branch %s was not published", id)
		}
	}

	// The coordinator stopped before its branches reached the queue: a
	// new one republishes the stored plan, once, and plans nothing anew.
	if err := js.DeleteStream(ctx, bus.JobsStream); err != nil {
		t.Fatal(err)
	}
	if b, err = bus.Open(ctx, js, bus.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	played(t, ctx, b, cfg.Spec.Job("r", 0, in2, 1), schema.StatusOK, 2)
	short, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	var done, total int
	err = Wait(short, b, m, WaitOptions{Instances: cfg.Instances, Progress: func(d, n int) { done, total = d, n }})
	if !errors.Is(err, context.DeadlineExceeded) || done != 4 || total != 4+4+2*2 {
		t.Fatalf("wait: %v at %d of %d; want 4 of 12 answered (4 samples, 4 + 4 branches)", err, done, total)
	}
	jobs = queued(t, ctx, js)
	if len(jobs) != 8 {
		t.Errorf("%d jobs queued after the restart, want the 8 branches once", len(jobs))
	}
	plans2, _ := b.ForkPlans(ctx, "r", 0)
	if !slices.EqualFunc(plans2[in1.InstanceID].Jobs, plans[in1.InstanceID].Jobs, func(a, b schema.Job) bool { return a.JobID == b.JobID }) {
		t.Error("instance 1 was planned again")
	}
	for _, j := range jobs {
		played(t, ctx, b, j, schema.StatusOK, 3)
	}
	if err := Wait(ctx, b, m, WaitOptions{Instances: cfg.Instances}); err != nil {
		t.Fatal(err)
	}
	if n, expected, err := Accounted(ctx, b, m); err != nil || n != 12 || expected != 12 {
		t.Errorf("accounted %d of %d (%v), want 12 of 12", n, expected, err)
	}
	again, err := Publish(ctx, cfg)
	if err != nil || !again.Complete || again.Queued != 0 {
		t.Errorf("publishing the finished run again: %+v, %v; want complete, nothing queued", again, err)
	}
}

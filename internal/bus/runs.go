package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/schema"
)

// RunTracker follows which jobs of a run iteration have a trajectory in
// the log. A run is counted by job id, never by message: a retried job
// counts once, and a message a2farm did not publish for one of the run's
// jobs — garbage, another run's, an undecodable payload — counts nowhere.
type RunTracker struct {
	b        *Bus
	expected map[string]bool
	answered map[string]bool
	decode   bool
	cons     jetstream.Consumer
	// last is when the latest answering trajectory was stored.
	last time.Time
	// Rejected receives each message that counts nowhere, with why (once
	// per message); nil ignores them.
	Rejected func(seq uint64, why string)
	// Observed receives each decoded trajectory of an expected job with
	// its place in the log (only when the tracker decodes).
	Observed func(tr schema.Trajectory, seq uint64)
}

// Expect adds jobs to those the run counts (its branches, once planned).
// A job that arrived before it was expected is counted when the tracker
// reads the log again from the start.
func (t *RunTracker) Expect(jobIDs ...string) {
	for _, id := range jobIDs {
		t.expected[id] = true
	}
}

// Expected is how many jobs the run counts.
func (t *RunTracker) Expected() int { return len(t.expected) }

// ExpectedJobs are the job ids a run manifest asks for.
func ExpectedJobs(m *schema.RunManifest) map[string]bool {
	out := make(map[string]bool, len(m.Instances)*m.Samples)
	for _, inst := range m.Instances {
		for s := range int64(m.Samples) {
			out[schema.JobID(m.RunID, m.Iteration, inst, s)] = true
		}
	}
	return out
}

// TrackRun starts following the run iteration of manifest m. With decode,
// every payload is decoded and must hold a trajectory of that job (what a
// coordinator deciding that a run is complete wants); without, the
// message ids a2farm's publishers set are trusted (fast enough for a
// status poll over a large run).
func (b *Bus) TrackRun(ctx context.Context, m *schema.RunManifest, decode bool) (*RunTracker, error) {
	subject := trajSubject(m.RunID, m.Iteration)
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject, subject + ".retry"}, HeadersOnly: !decode}
	cons, err := b.js.OrderedConsumer(ctx, TrajStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("follow run %s: %w", m.RunID, err)
	}
	return &RunTracker{b: b, expected: ExpectedJobs(m), answered: map[string]bool{}, decode: decode, cons: cons}, nil
}

// Update reads what arrived since the last call and returns how many
// expected jobs have a trajectory.
func (t *RunTracker) Update(ctx context.Context) (int, error) {
	for {
		batch, err := t.cons.Fetch(256, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return len(t.answered), err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			t.observe(ctx, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return len(t.answered), err
		}
		if got == 0 {
			return len(t.answered), nil
		}
	}
}

// Answered reports whether the job has a trajectory.
func (t *RunTracker) Answered(jobID string) bool { return t.answered[jobID] }

// LastAnswer is when the latest trajectory that answered a job was
// stored (zero before any): a finished run's end.
func (t *RunTracker) LastAnswer() time.Time { return t.last }

func (t *RunTracker) observe(ctx context.Context, msg jetstream.Msg) {
	var seq uint64
	var stored time.Time
	if md, err := msg.Metadata(); err == nil {
		seq, stored = md.Sequence.Stream, md.Timestamp
	}
	reject := func(why string) {
		if t.Rejected != nil {
			t.Rejected(seq, why)
		}
	}
	id, _, _ := strings.Cut(msg.Headers().Get(jetstream.MsgIDHeader), "#")
	switch {
	case id == "" || msg.Headers().Get(encodingHeader) == "":
		reject("no message id or encoding header: not published by a2farm")
		return
	case !t.expected[id]:
		reject(fmt.Sprintf("message id %q is not a job of this run", id))
		return
	}
	if t.decode {
		tr, err := t.b.DecodeTrajectory(ctx, msg)
		if err != nil {
			reject(fmt.Sprintf("job %s: undecodable trajectory: %v", id, err))
			return
		}
		if tr.JobID != id {
			reject(fmt.Sprintf("message id %q holds the trajectory of job %q", id, tr.JobID))
			return
		}
		if t.Observed != nil {
			t.Observed(tr, seq)
		}
	}
	t.answered[id] = true
	if stored.After(t.last) {
		t.last = stored
	}
}

// Quarantine moves a message that is not what its subject promises to
// the dead letters, with the reason in a header, so that it can be
// inspected; the caller then terminates the original.
func (b *Bus) Quarantine(ctx context.Context, msg jetstream.Msg, reason string) error {
	// Two tokens after the prefix: no run's dead-letter subject looks
	// like it (run tokens hold no dots).
	out := &nats.Msg{Subject: deadPrefix + "quarantine.trajectories", Data: msg.Data(), Header: nats.Header{}}
	for k, v := range msg.Headers() {
		out.Header[k] = v
	}
	out.Header.Del(jetstream.MsgIDHeader)
	out.Header.Set("A2farm-Quarantine-Reason", reason)
	out.Header.Set("A2farm-Quarantine-Subject", msg.Subject())
	if _, err := b.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	// Out of the log, so that nothing that reads message ids counts it.
	if md, err := msg.Metadata(); err == nil && md.Stream == TrajStream {
		if err := b.Traj.DeleteMsg(ctx, md.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("quarantine: remove from the log: %w", err)
		}
	}
	return nil
}

// Quarantined counts the messages moved to the dead letters as not what
// their subject promised.
func (b *Bus) Quarantined(ctx context.Context) (int, error) {
	return countSubject(ctx, b.Dead, deadPrefix+"quarantine.trajectories")
}

// learnerReportKey is where the active learner reports its groups in the
// runs bucket (run keys never start with "_"... see ListRuns).
const learnerReportKey = "_learner"

// LearnerReport is what the active learner has made of the runs: groups
// seen and sharded per run iteration, and the groups whose shard could not
// be written yet.
type LearnerReport struct {
	Updated time.Time             `json:"updated"`
	Runs    map[string]*RunShards `json:"runs"` // by RunShardsKey
	Failing []FailingGroup        `json:"failing,omitempty"`
}

// RunShards counts a run iteration's groups at the learner.
type RunShards struct {
	Groups  int `json:"groups"`  // instances with an archived trajectory
	Sharded int `json:"sharded"` // instances whose shard is written
}

// FailingGroup is a group whose close failed (its shard could not be
// written, or its run manifest or fork plan read) and is being retried.
type FailingGroup struct {
	Run       string    `json:"run"`
	Iteration int64     `json:"iteration"`
	Instance  string    `json:"instance"`
	Error     string    `json:"error"`
	Failures  int       `json:"failures"`
	NextRetry time.Time `json:"next_retry"`
}

// RunShardsKey keys LearnerReport.Runs.
func RunShardsKey(run string, iteration int64) string { return fmt.Sprintf("%s/%d", run, iteration) }

// PutLearnerReport stores the active learner's report.
func (b *Bus) PutLearnerReport(ctx context.Context, r *LearnerReport) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = b.Runs.Put(ctx, learnerReportKey, data)
	return err
}

// GetLearnerReport reads the learner's report; nil when none was stored.
func (b *Bus) GetLearnerReport(ctx context.Context) (*LearnerReport, error) {
	e, err := b.Runs.Get(ctx, learnerReportKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r LearnerReport
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("learner report: %w", err)
	}
	return &r, nil
}

// goldKey is the runs-bucket key of one instance's gold in a run
// iteration; the "_" prefix keeps it apart from run manifests.
func goldKey(run string, iteration int64, instance string) string {
	return fmt.Sprintf("_gold.%s.%d.%s", subjectToken(run), iteration, subjectToken(instance))
}

// goldEntry wraps an instance's gold so that "no usable gold" (null) is
// told apart from "not stored".
type goldEntry struct {
	Gold *schema.Locations `json:"gold"`
}

// PutGold stores the gold of one instance of a run iteration (nil: the
// instance has no usable gold), durably and apart from every other
// instance, so that no entry grows with the dataset.
func (b *Bus) PutGold(ctx context.Context, run string, iteration int64, instance string, gold *schema.Locations) error {
	data, err := json.Marshal(goldEntry{Gold: gold})
	if err != nil {
		return err
	}
	if _, err := b.Runs.Put(ctx, goldKey(run, iteration, instance), data); err != nil {
		return fmt.Errorf("store gold of %s: %w", instance, err)
	}
	return nil
}

// ErrNoGold says a run iteration stored no gold for an instance.
var ErrNoGold = errors.New("no gold stored for the instance")

// GetGold reads one instance's gold: ok is false when the instance has no
// usable gold; ErrNoGold when none was stored.
func (b *Bus) GetGold(ctx context.Context, run string, iteration int64, instance string) (gold schema.Locations, ok bool, err error) {
	e, err := b.Runs.Get(ctx, goldKey(run, iteration, instance))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return schema.Locations{}, false, fmt.Errorf("%s/%d/%s: %w", run, iteration, instance, ErrNoGold)
	}
	if err != nil {
		return schema.Locations{}, false, err
	}
	var g goldEntry
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return schema.Locations{}, false, fmt.Errorf("gold of %s: %w", instance, err)
	}
	if g.Gold == nil {
		return schema.Locations{}, false, nil
	}
	return *g.Gold, true, nil
}

// ForkPlan is what the coordinator decided for one instance's branches,
// stored before any of them is published: the learner waits for exactly
// these jobs beside the base samples, and a coordinator started again
// republishes them instead of planning anew. No jobs is a plan too (no
// parent could fork).
type ForkPlan struct {
	Instance string       `json:"instance"`
	Jobs     []schema.Job `json:"jobs"`
	Planned  time.Time    `json:"planned"`
}

// forkKey is the runs-bucket key of one instance's fork plan.
func forkKey(run string, iteration int64, instance string) string {
	return fmt.Sprintf("_forks.%s.%d.%s", subjectToken(run), iteration, subjectToken(instance))
}

// PutForkPlan stores an instance's fork plan; the first one stored wins,
// so that two coordinators (or one started again) publish one plan.
func (b *Bus) PutForkPlan(ctx context.Context, run string, iteration int64, p ForkPlan) (ForkPlan, error) {
	instance := p.Instance
	data, err := json.Marshal(p)
	if err != nil {
		return ForkPlan{}, err
	}
	_, err = b.Runs.Create(ctx, forkKey(run, iteration, instance), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		stored, found, err := b.GetForkPlan(ctx, run, iteration, instance)
		if err == nil && !found {
			err = fmt.Errorf("fork plan of %s vanished", instance)
		}
		return stored, err
	}
	if err != nil {
		return ForkPlan{}, fmt.Errorf("store fork plan of %s: %w", instance, err)
	}
	return p, nil
}

// GetForkPlan reads an instance's fork plan; found is false before the
// coordinator made one.
func (b *Bus) GetForkPlan(ctx context.Context, run string, iteration int64, instance string) (p ForkPlan, found bool, err error) {
	e, err := b.Runs.Get(ctx, forkKey(run, iteration, instance))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ForkPlan{}, false, nil
	}
	if err != nil {
		return ForkPlan{}, false, err
	}
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return ForkPlan{}, false, fmt.Errorf("fork plan of %s: %w", instance, err)
	}
	return p, true, nil
}

// ForkPlans reads every fork plan of a run iteration, by instance id.
func (b *Bus) ForkPlans(ctx context.Context, run string, iteration int64) (map[string]ForkPlan, error) {
	w, err := b.Runs.WatchFiltered(ctx, []string{fmt.Sprintf("_forks.%s.%d.>", subjectToken(run), iteration)},
		jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("fork plans of %s: %w", run, err)
	}
	defer w.Stop()
	out := map[string]ForkPlan{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil { // every stored plan has been read
				return out, nil
			}
			var p ForkPlan
			if err := json.Unmarshal(e.Value(), &p); err != nil {
				return nil, fmt.Errorf("fork plan %s: %w", e.Key(), err)
			}
			out[p.Instance] = p
		}
	}
}

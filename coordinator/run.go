package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/schema"
)

// RunConfig configures the publication of a run.
type RunConfig struct {
	Bus       *bus.Bus
	RunID     string
	Iteration int64
	Instances []schema.Instance
	Gold      map[string]schema.Locations
	Samples   int
	// Spec is what acts in every job, and the limits of its episodes.
	Spec schema.RunSpec
	// Rerun publishes a new attempt of every job of a run that exists.
	Rerun bool
	// Progress, when set, is told about every published job.
	Progress func(done, total int)
	// OnWait, when set, is told the first transient error of each call
	// Publish waits out (a cluster electing a leader answers "no
	// responders"; bus.Retry).
	OnWait func(error)
}

// Publish stores the run manifest and publishes issue × N jobs, waiting
// out what a cluster answers while it elects a leader (bus.Retry). Running
// it again for the same run and iteration publishes only what is missing:
// nothing when every job has a trajectory (Published then says so), the
// jobs without one otherwise — job ids are message ids, so a job still in
// the queue is not stored twice within the dedup window. Rerun makes a new
// attempt of every job instead; the learner keeps a later attempt over an
// earlier one unless the later one failed for infrastructure reasons.
func Publish(ctx context.Context, cfg RunConfig) (*Published, error) {
	switch {
	case cfg.Bus == nil:
		return nil, errors.New("coordinator: a bus is required")
	case cfg.RunID == "":
		return nil, &ConfigError{errors.New("a run id is required (--run)")}
	case cfg.Samples < 1:
		return nil, &ConfigError{fmt.Errorf("samples must be >= 1, got %d", cfg.Samples)}
	case len(cfg.Instances) == 0:
		return nil, &ConfigError{errors.New("the dataset has no valid instance")}
	}
	m := &schema.RunManifest{RunID: cfg.RunID, Iteration: cfg.Iteration, Samples: cfg.Samples,
		Spec: cfg.Spec, Attempt: 1, Created: time.Now().UTC()}
	for _, in := range cfg.Instances {
		m.Instances = append(m.Instances, in.InstanceID)
	}
	m.Expected = len(cfg.Instances) * cfg.Samples
	out := &Published{Manifest: m}
	answered := map[string]bool{}
	// One request per call: each attempt is bounded.
	retry := func(op func(context.Context) error) error {
		return bus.Retry(ctx, bus.RetryOptions{Attempt: bus.AttemptTimeout, OnRetry: cfg.OnWait}, op)
	}
	var prev *schema.RunManifest
	err := retry(func(ctx context.Context) (err error) {
		prev, err = cfg.Bus.GetRun(ctx, cfg.RunID, cfg.Iteration)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			prev, err = nil, nil // a new run
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", cfg.RunID, err)
	}
	if prev != nil {
		if !sameJobs(prev, m) {
			return nil, &ConfigError{fmt.Errorf("run %s iteration %d exists with other instances or samples; use another --run or --iteration",
				cfg.RunID, cfg.Iteration)}
		}
		m.Created, m.Attempt = prev.Created, max(prev.Attempt, 1)
		var (
			f        *follower
			done     int
			complete bool
		)
		// Reading the run's trajectories is many requests, bounded by ctx
		// only; after a failed read the follower starts again, as Wait's.
		err := bus.Retry(ctx, bus.RetryOptions{OnRetry: cfg.OnWait}, func(ctx context.Context) (err error) {
			if f == nil {
				start, cancel := context.WithTimeout(ctx, bus.AttemptTimeout)
				f, err = newFollower(start, cfg.Bus, prev, nil, true)
				cancel()
				if err != nil {
					return err
				}
			}
			if done, _, complete, err = f.update(ctx); err != nil {
				f = nil
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read run %s: %w", cfg.RunID, err)
		}
		for id := range bus.ExpectedJobs(prev) {
			answered[id] = f.t.Answered(id)
			if answered[id] {
				out.Answered++
			}
		}
		if cfg.Rerun {
			m.Attempt++
			clear(answered)
		} else if complete {
			out.Answered, out.Complete = done, true
			return out, nil
		}
	}
	if err := checkSizes(cfg, m); err != nil {
		return nil, err
	}
	// Gold first, one entry per instance: the learner refuses to shard a
	// group without it, so it must be durable before any job can finish.
	for _, in := range cfg.Instances {
		var g *schema.Locations
		if loc, ok := cfg.Gold[in.InstanceID]; ok {
			g = &loc
		}
		if err := retry(func(ctx context.Context) error {
			return cfg.Bus.PutGold(ctx, cfg.RunID, cfg.Iteration, in.InstanceID, g)
		}); err != nil {
			return nil, err
		}
	}
	if err := retry(func(ctx context.Context) error { return cfg.Bus.PutRun(ctx, m) }); err != nil {
		return nil, err
	}
	total := m.Expected - len(filter(answered))
	for _, in := range cfg.Instances {
		for s := range int64(cfg.Samples) {
			job := cfg.Spec.Job(cfg.RunID, cfg.Iteration, in, s)
			if answered[job.JobID] {
				continue
			}
			job.Attempt = m.Attempt
			if err := retry(func(ctx context.Context) error { return publishJob(ctx, cfg.Bus, job) }); err != nil {
				return nil, err
			}
			out.Queued++
			if cfg.Progress != nil {
				cfg.Progress(out.Queued, total)
			}
		}
	}
	return out, nil
}

// checkSizes refuses, before anything is published, a run whose manifest
// or any job would not fit in a message: publishing part of a run would
// leave one that can never complete.
func checkSizes(cfg RunConfig, m *schema.RunManifest) error {
	limit := cfg.Bus.MaxPayload()
	if limit <= 0 {
		return nil
	}
	if data, err := json.Marshal(m); err != nil || int64(len(data)) > limit {
		return &ConfigError{fmt.Errorf("the run manifest (%d instance ids) takes %d bytes, over the server's %d-byte message limit: split the dataset into several runs",
			len(m.Instances), len(data), limit)}
	}
	for _, in := range cfg.Instances {
		data, err := json.Marshal(cfg.Spec.Job(cfg.RunID, cfg.Iteration, in, 0))
		if err != nil {
			return err
		}
		if int64(len(data)) > limit {
			return &ConfigError{fmt.Errorf("instance %s: its job takes %d bytes, over the server's %d-byte message limit (its problem statement is %d bytes); nothing was published",
				in.InstanceID, len(data), limit, len(in.ProblemStatement))}
		}
	}
	return nil
}

// Published is what Publish did.
type Published struct {
	Manifest *schema.RunManifest
	// Queued jobs were published; Answered jobs already had a trajectory;
	// Complete says every job had one, so nothing was published.
	Queued, Answered int
	Complete         bool
}

func filter(m map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k, v := range m {
		if v {
			out[k] = true
		}
	}
	return out
}

// sameJobs reports whether two manifests ask for the same jobs.
func sameJobs(a, b *schema.RunManifest) bool {
	return a.Samples == b.Samples && slices.Equal(a.Instances, b.Instances)
}

// WaitOptions say what Wait reports to, and give the dataset rows a run
// that branches plans its branches from.
type WaitOptions struct {
	// Instances are the run's dataset rows (needed when the run branches).
	Instances []schema.Instance
	// Progress is told how many jobs have a trajectory of how many are
	// expected (the total grows as branches are planned).
	Progress func(done, total int)
	// Rejected receives each message that counts nowhere.
	Rejected func(seq uint64, why string)
	// OnError is told about a lost server connection, which is waited out.
	OnError func(error)
}

// Wait follows a run until every expected job has a decodable trajectory
// of the run in the log (a dead-lettered job has one too: an infra_error).
// A run that branches gets each instance's branches planned and published
// here once its base samples are in, and is complete when they are
// answered too. Wait returns when the run is complete, ctx ends or the
// server refuses for good (bus.Permanent); a lost server connection is
// waited out.
func Wait(ctx context.Context, b *bus.Bus, m *schema.RunManifest, o WaitOptions) error {
	if m.Spec.Branching.On() && len(o.Instances) == 0 {
		return errors.New("coordinator: a run that branches needs its dataset rows to plan branches from")
	}
	var f *follower
	for {
		var err error
		if f == nil {
			if f, err = newFollower(ctx, b, m, o.Instances, true); err == nil {
				f.t.Rejected = o.Rejected
			}
		}
		var n, total int
		complete := false
		if err == nil {
			n, total, complete, err = f.update(ctx)
		}
		if err != nil && ctx.Err() == nil {
			if bus.Permanent(err) { // the server will never do it: waiting would loop forever
				return fmt.Errorf("follow run %s: %w", m.RunID, err)
			}
			if o.OnError != nil {
				o.OnError(err)
			}
			f = nil // follow again from the start once the server answers
		} else if o.Progress != nil {
			o.Progress(min(n, total), total)
		}
		if err == nil && complete {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Accounted counts the jobs of a run iteration that have a trajectory in
// the log by job id (infra_error ones included), from message ids, and
// the jobs expected.
// Expected counts the planned branches too.
func Accounted(ctx context.Context, b *bus.Bus, m *schema.RunManifest) (accounted, expected int, err error) {
	accounted, expected, _, err = accountedAt(ctx, b, m)
	return accounted, expected, err
}

// accountedAt is Accounted with the time the latest answer was stored.
func accountedAt(ctx context.Context, b *bus.Bus, m *schema.RunManifest) (accounted, expected int, last time.Time, err error) {
	f, err := newFollower(ctx, b, m, nil, false)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	accounted, expected, _, err = f.update(ctx)
	return accounted, expected, f.t.LastAnswer(), err
}

package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/a2farm/a2farm/internal/branch"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/schema"
)

// follower follows a run iteration's trajectories by job id. When the run
// branches it also plans each instance's branches as soon as its base
// samples are all in: the fork plan is stored first (the learner waits
// for exactly its jobs; the first plan stored wins), then its jobs are
// published. A follower started again — a restarted coordinator — reads
// the stored plans and republishes their jobs that have no trajectory.
type follower struct {
	b         *bus.Bus
	m         *schema.RunManifest
	instances map[string]schema.Instance
	t         *bus.RunTracker
	plans     map[string]bus.ForkPlan // by instance
	// parents holds the base trajectories of instances not planned yet,
	// with where each sits in the log.
	parents map[string]map[int64]parentRecord
	// republish is set until the stored plans' jobs have been republished.
	republish bool
}

type parentRecord struct {
	tr  schema.Trajectory
	seq uint64
}

func newFollower(ctx context.Context, b *bus.Bus, m *schema.RunManifest, instances []schema.Instance, decode bool) (*follower, error) {
	t, err := b.TrackRun(ctx, m, decode)
	if err != nil {
		return nil, err
	}
	f := &follower{b: b, m: m, t: t, instances: map[string]schema.Instance{}, plans: map[string]bus.ForkPlan{},
		parents: map[string]map[int64]parentRecord{}}
	for _, in := range instances {
		f.instances[in.InstanceID] = in
	}
	if !m.Spec.Branching.On() {
		return f, nil
	}
	if f.plans, err = b.ForkPlans(ctx, m.RunID, m.Iteration); err != nil {
		return nil, err
	}
	for _, p := range f.plans {
		for _, j := range p.Jobs {
			t.Expect(j.JobID)
		}
	}
	if decode && len(instances) > 0 { // a coordinator: it plans and publishes
		f.republish = true
		t.Observed = f.observe
	}
	return f, nil
}

// observe keeps the base trajectories of instances that wait for a plan.
func (f *follower) observe(tr schema.Trajectory, seq uint64) {
	if tr.Fork.IsBranch() || tr.Sample >= int64(f.m.Samples) {
		return
	}
	if _, planned := f.plans[tr.InstanceID]; planned {
		return
	}
	byS := f.parents[tr.InstanceID]
	if byS == nil {
		byS = map[int64]parentRecord{}
		f.parents[tr.InstanceID] = byS
	}
	if old, ok := byS[tr.Sample]; !ok || schema.Supersedes(tr, old.tr) {
		byS[tr.Sample] = parentRecord{tr, seq}
	}
}

// update reads the log, plans and publishes the branches of instances
// whose base samples are in, and reports how many jobs have a trajectory
// of how many expected; complete once every job, branches included, has
// one.
func (f *follower) update(ctx context.Context) (done, total int, complete bool, err error) {
	n, err := f.t.Update(ctx)
	if err != nil {
		return n, f.t.Expected(), false, err
	}
	if f.republish {
		if err := f.republishPlans(ctx); err != nil {
			return n, f.t.Expected(), false, err
		}
		f.republish = false
	}
	for _, id := range slices.Sorted(maps.Keys(f.parents)) {
		if len(f.parents[id]) < f.m.Samples {
			continue
		}
		if err := f.plan(ctx, id); err != nil {
			return n, f.t.Expected(), false, err
		}
	}
	total = f.t.Expected()
	complete = n >= total && (!f.m.Spec.Branching.On() || len(f.plans) >= len(f.m.Instances))
	return n, total, complete, nil
}

// plan stores and publishes the branches of one instance.
func (f *follower) plan(ctx context.Context, instance string) error {
	in, ok := f.instances[instance]
	if !ok {
		return fmt.Errorf("instance %s of run %s is not in the dataset given", instance, f.m.RunID)
	}
	recs := f.parents[instance]
	base := make([]schema.Trajectory, 0, len(recs))
	for _, r := range recs {
		base = append(base, r.tr)
	}
	points := branch.Plan(f.m.Spec.Branching, base)
	jobs := branch.Jobs(f.m.Spec, f.m.RunID, f.m.Iteration, in, f.m.Samples, points, func(p schema.Trajectory) int64 {
		return int64(recs[p.Sample].seq)
	})
	for i := range jobs {
		jobs[i].Attempt = f.m.Attempt
	}
	plan, err := f.b.PutForkPlan(ctx, f.m.RunID, f.m.Iteration, bus.ForkPlan{Instance: instance, Jobs: jobs, Planned: time.Now().UTC()})
	if err != nil {
		return err
	}
	f.plans[instance] = plan
	delete(f.parents, instance)
	for _, j := range plan.Jobs {
		f.t.Expect(j.JobID)
		if err := publishJob(ctx, f.b, j); err != nil {
			return err
		}
	}
	return nil
}

// republishPlans publishes the stored plans' jobs that have no trajectory
// (a coordinator stopped between storing a plan and publishing it); job
// ids are message ids, so one still queued is stored once.
func (f *follower) republishPlans(ctx context.Context) error {
	for _, id := range slices.Sorted(maps.Keys(f.plans)) {
		for _, j := range f.plans[id].Jobs {
			if f.t.Answered(j.JobID) {
				continue
			}
			if err := publishJob(ctx, f.b, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// publishJob queues a job; a later attempt gets its own message id.
func publishJob(ctx context.Context, b *bus.Bus, job schema.Job) error {
	if job.Attempt > 1 {
		return b.PublishJobAttempt(ctx, job)
	}
	return b.PublishJob(ctx, job)
}

package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
)

// FarmStatus is what `a2farm status` shows: the queue, the live workers
// and how far each run has come.
type FarmStatus struct {
	At       time.Time `json:"at"`
	Pending  uint64    `json:"pending"`   // jobs not yet delivered
	InFlight uint64    `json:"in_flight"` // delivered, not yet acknowledged
	// Redelivered counts jobs delivered more than once and not yet done:
	// workers that died or timed out on them.
	Redelivered uint64 `json:"redelivered"`
	// HandedOff counts jobs a worker that could not play them handed to
	// a named one that can: waiting in its inbox or being played there.
	HandedOff uint64          `json:"handed_off,omitempty"`
	Workers   []bus.Heartbeat `json:"workers"`
	// Silent are workers whose heartbeat has not been renewed for two of
	// its periods: stopped or cut off, though their entry lives until it
	// expires.
	Silent []string `json:"silent,omitempty"`
	// Learner is the trajectory log's consumer: how far behind it is and
	// whether a learner is receiving.
	Learner bus.LearnerState `json:"learner"`
	// FailingShards are groups whose shard the learner could not write
	// yet; it retries them.
	FailingShards []bus.FailingGroup `json:"failing_shards,omitempty"`
	Runs          []RunStatus        `json:"runs"`
}

// RunStatus is the progress of one run iteration.
type RunStatus struct {
	RunID     string `json:"run_id"`
	Iteration int64  `json:"iteration"`
	Expected  int    `json:"expected"`
	Accounted int    `json:"accounted"` // trajectories in the log, infra errors included
	Dead      int    `json:"dead"`      // dead letters waiting for `jobs retry`
	// Groups is the run's instances; Sharded how many the learner has
	// written a shard for (by its last report).
	Groups  int `json:"groups"`
	Sharded int `json:"sharded"`
	// DeadReasons counts the dead letters by why their jobs were given up
	// ("" when a job simply ran out of deliveries).
	DeadReasons map[string]int `json:"dead_reasons,omitempty"`
	Created     time.Time      `json:"created"`
	// PerMinute is the run's average trajectory rate since it was
	// published (a finished run's: until its last trajectory); ETA
	// extrapolates it to the jobs still missing.
	PerMinute float64       `json:"per_minute"`
	ETA       time.Duration `json:"eta_ns,omitempty"`
}

// Status reads the farm's state from the bus as of now (the CLI passes
// the wall clock, tests a fixed time: silence, rates and ETAs are
// computed against it); runID narrows it to one run.
func Status(ctx context.Context, b *bus.Bus, runID string, now time.Time) (*FarmStatus, error) {
	st := &FarmStatus{At: now.UTC()}
	var err error
	q, err := b.Queue(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue depth: %w", err)
	}
	st.Pending, st.InFlight, st.Redelivered, st.HandedOff = q.Pending, q.InFlight, q.Redelivered, q.Handed
	if st.Workers, err = b.LiveWorkers(ctx); err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	every := max(time.Second, b.HeartbeatTTL()/3)
	for _, hb := range st.Workers {
		if st.At.Sub(hb.Updated) > 2*every+time.Second {
			st.Silent = append(st.Silent, hb.ID)
		}
	}
	if st.Learner, err = b.Learner(ctx); err != nil {
		return nil, fmt.Errorf("learner: %w", err)
	}
	report, err := b.GetLearnerReport(ctx)
	if err != nil {
		return nil, fmt.Errorf("learner report: %w", err)
	}
	if report != nil {
		st.FailingShards = report.Failing
	}
	runs, err := b.ListRuns(ctx)
	if err != nil {
		return nil, fmt.Errorf("runs: %w", err)
	}
	for _, m := range runs {
		if runID != "" && m.RunID != runID {
			continue
		}
		n, expected, last, err := accountedAt(ctx, b, &m)
		if err != nil {
			return nil, err
		}
		dead, err := b.DeadCount(ctx, m.RunID)
		if err != nil {
			return nil, err
		}
		r := RunStatus{RunID: m.RunID, Iteration: m.Iteration, Expected: expected, Accounted: n, Dead: dead, Created: m.Created,
			Groups: len(m.Instances)}
		if report != nil {
			if rs := report.Runs[bus.RunShardsKey(m.RunID, m.Iteration)]; rs != nil {
				r.Sharded = rs.Sharded
			}
		}
		if dead > 0 {
			letters, err := b.DeadLetters(ctx, m.RunID)
			if err != nil {
				return nil, fmt.Errorf("dead letters of %s: %w", m.RunID, err)
			}
			r.DeadReasons = map[string]int{}
			for _, dl := range letters {
				r.DeadReasons[dl.Reason]++
			}
		}
		end := st.At
		if n >= expected && !last.IsZero() {
			end = last // a finished run's rate is over its own duration
		}
		if elapsed := end.Sub(m.Created); elapsed > 0 && n > 0 {
			r.PerMinute = float64(n) / elapsed.Minutes()
			if n < expected {
				r.ETA = time.Duration(float64(expected-n) / r.PerMinute * float64(time.Minute))
			}
		}
		st.Runs = append(st.Runs, r)
	}
	if runID != "" && len(st.Runs) == 0 {
		return nil, fmt.Errorf("no run %q on this farm", runID)
	}
	return st, nil
}

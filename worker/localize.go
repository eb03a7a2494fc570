package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/branch"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// LocalizeConfig configures a single-process localization run.
type LocalizeConfig struct {
	Instances []schema.Instance
	Repos     *gitrepo.Set
	// Spec is what acts in every episode and the episodes' limits;
	// Policies builds the model of each job from it.
	Spec     schema.RunSpec
	Policies interface {
		Model(job schema.Job) (agent.Model, error)
		Probe(ctx context.Context)
	}
	Index   repoindex.BuildOptions
	Samples int
	// Concurrency bounds episodes in flight (default 4).
	Concurrency int
	RunID       string
	// Out receives trajectories/<instance>.arrow and loc_outputs.jsonl.
	Out      string
	Progress func(done, total int)
	Log      zerolog.Logger
	// OutageBudget is how long an episode waits out an outage of its model
	// (no server answers) before its job is recorded as an infra_error
	// (default worker.DefaultOutageBudget); meanwhile it is played again
	// from the start whenever a server answers.
	OutageBudget time.Duration
}

func (c *LocalizeConfig) validate() error {
	switch {
	case c.Repos == nil || c.Policies == nil:
		return errors.New("localize: repositories and policies are required")
	case c.Index.Languages.Len() == 0:
		return errors.New("localize: no language to index repositories with (Index.Languages)")
	case c.Samples < 1:
		return fmt.Errorf("samples must be >= 1, got %d", c.Samples)
	case c.Out == "":
		return errors.New("an output folder is required (--out)")
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency must be >= 0, got %d", c.Concurrency)
	}
	return nil
}

// Localize runs every instance × sample and writes the trajectories and
// predictions. Instances whose index cannot be built are logged and
// recorded as infra_error trajectories; a cancelled context stops the run.
func Localize(ctx context.Context, cfg LocalizeConfig) ([]schema.Trajectory, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.RunID == "" {
		cfg.RunID = "localize"
	}
	if cfg.OutageBudget <= 0 {
		cfg.OutageBudget = DefaultOutageBudget
	}
	if len(cfg.Instances) > 0 { // refuse a policy that cannot be served before any work
		if _, err := cfg.Policies.Model(cfg.Spec.Job(cfg.RunID, 0, cfg.Instances[0], 0)); err != nil {
			return nil, err
		}
	}
	trajDir := filepath.Join(cfg.Out, "trajectories")
	if err := os.MkdirAll(trajDir, 0o755); err != nil {
		return nil, err
	}
	// Branches join the total as they are planned.
	var total atomic.Int64
	total.Store(int64(len(cfg.Instances) * cfg.Samples))
	results := make([][]schema.Trajectory, len(cfg.Instances))
	var done atomic.Int64
	var progressMu sync.Mutex
	p := &localProgress{total: &total, tick: func() {
		if cfg.Progress != nil {
			progressMu.Lock()
			cfg.Progress(int(done.Add(1)), int(total.Load()))
			progressMu.Unlock()
		}
	}}
	// Instances run a few at a time; each shares one index among its
	// samples, which run in parallel.
	perInstance := min(cfg.Samples, cfg.Concurrency)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, cfg.Concurrency/perInstance))
	for i, inst := range cfg.Instances {
		g.Go(func() error {
			trs, err := cfg.runInstance(gctx, inst, perInstance, p)
			if err != nil {
				return err
			}
			results[i] = trs
			return writeTrajectories(filepath.Join(trajDir, safeName(inst.InstanceID)+".arrow"), trs)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var all []schema.Trajectory
	for _, trs := range results {
		all = append(all, trs...)
	}
	return all, writeLocOutputs(filepath.Join(cfg.Out, "loc_outputs.jsonl"), all)
}

// localProgress counts finished rollouts against a total that grows as
// branches are planned.
type localProgress struct {
	total *atomic.Int64
	tick  func()
}

// runInstance plays an instance's base samples on one index, then, when
// the run branches, the branches planned from them, each replaying its
// parent's record in memory.
func (cfg *LocalizeConfig) runInstance(ctx context.Context, inst schema.Instance, parallel int, p *localProgress) ([]schema.Trajectory, error) {
	jobs := make([]schema.Job, cfg.Samples)
	for s := range jobs {
		jobs[s] = cfg.Spec.Job(cfg.RunID, 0, inst, int64(s))
	}
	idx, err := repoindex.Build(ctx, cfg.Repos, inst.Repo, inst.BaseCommit, cfg.Index)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		cfg.Log.Error().Err(err).Str("instance", inst.InstanceID).Msg("index build failed; recording infra_error trajectories")
		trs := make([]schema.Trajectory, len(jobs))
		for s, job := range jobs {
			trs[s] = job.InfraError(err.Error(), time.Now().UTC())
			p.tick()
		}
		return trs, nil
	}
	defer idx.Close()
	trs, err := cfg.playAll(ctx, jobs, nil, idx, parallel, p.tick)
	if err != nil || !cfg.Spec.Branching.On() {
		return trs, err
	}
	points := branch.Plan(cfg.Spec.Branching, trs)
	forks := branch.Jobs(cfg.Spec, cfg.RunID, 0, inst, cfg.Samples, points, nil)
	p.total.Add(int64(len(forks)))
	parents := make([]*schema.Trajectory, len(forks))
	for i, job := range forks {
		parents[i] = &trs[job.Fork.ParentSample]
	}
	branches, err := cfg.playAll(ctx, forks, parents, idx, parallel, p.tick)
	return append(trs, branches...), err
}

// playAll plays jobs on idx, parallel at a time; parents[i] is the record
// job i replays (nil: base samples).
func (cfg *LocalizeConfig) playAll(ctx context.Context, jobs []schema.Job, parents []*schema.Trajectory, idx *repoindex.Index,
	parallel int, tick func()) ([]schema.Trajectory, error) {
	trs := make([]schema.Trajectory, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, job := range jobs {
		g.Go(func() error {
			model, err := cfg.Policies.Model(job)
			if err != nil {
				return err
			}
			var parent *schema.Trajectory
			if parents != nil {
				parent = parents[i]
			}
			tr, err := cfg.playThroughOutages(gctx, job, parent, idx, model)
			if err != nil {
				return err
			}
			trs[i] = tr
			tick()
			return nil
		})
	}
	return trs, g.Wait()
}

// playThroughOutages plays a job, and again from the start each time its
// model could not be reached, waiting between tries (doubling from
// outageDelay/5 up to maxOutageDelay/4) while the servers are probed;
// once the outage has lasted OutageBudget the job is recorded as an
// infra_error with the reason.
func (cfg *LocalizeConfig) playThroughOutages(ctx context.Context, job schema.Job, parent *schema.Trajectory, idx *repoindex.Index, model agent.Model) (schema.Trajectory, error) {
	var since time.Time
	wait := outageDelay / 5
	for {
		tr, err := play(ctx, job, parent, idx, model, "localize", nil)
		if !errors.Is(err, agent.ErrUnavailable) {
			return tr, err
		}
		if since.IsZero() {
			since = time.Now()
		}
		if lasted := time.Since(since); lasted >= cfg.OutageBudget {
			return job.InfraError(fmt.Sprintf("no server of model %q answered for %s (outage budget %s): %v",
				job.Policy.Model, lasted.Round(time.Second), cfg.OutageBudget, err), time.Now().UTC()), nil
		}
		cfg.Log.Warn().Err(err).Str("job", job.JobID).Dur("retry_in", wait).Msg("the policy is unreachable; playing the episode again once it answers")
		select {
		case <-ctx.Done():
			return schema.Trajectory{}, ctx.Err()
		case <-time.After(wait):
		}
		cfg.Policies.Probe(ctx)
		wait = min(maxOutageDelay/4, 2*wait)
	}
}

// safeName keeps instance ids usable as file names.
func safeName(id string) string {
	out := []rune(id)
	for i, r := range out {
		if r == '/' || r == '\\' || r == 0 {
			out[i] = '_'
		}
	}
	return string(out)
}

func writeTrajectories(path string, trs []schema.Trajectory) error {
	rec := schema.EncodeTrajectories(nil, trs...)
	defer rec.Release()
	return atomicfile.Write(path, func(w io.Writer) error { return schema.WriteIPC(w, schema.TrajectorySchema(), rec) })
}

func writeLocOutputs(path string, trs []schema.Trajectory) error {
	return atomicfile.Write(path, func(f io.Writer) error {
		w := bufio.NewWriter(f)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for _, tr := range trs {
			if tr.Fork.IsBranch() {
				continue // predictions are the base samples'; branches are training data
			}
			row := schema.LocOutput{InstanceID: tr.InstanceID, Sample: tr.Sample, Files: nonNil(tr.Predictions.Files),
				Modules: nonNil(tr.Predictions.Modules), Entities: nonNil(tr.Predictions.Entities), RawOutput: tr.FinalAnswer}
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		return w.Flush()
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

package worker

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
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

// MaxSamples bounds the episodes per instance of one run (and so the
// trajectories an instance holds in memory before they are written).
const MaxSamples = 10_000

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
	// FirstSample numbers the samples FirstSample..FirstSample+Samples-1,
	// so that a run playing an instance again (a teacher's next try) plays
	// new jobs: other job ids, other seeds. Branching needs it 0.
	FirstSample int64
	// Concurrency bounds episodes in flight (default 4).
	Concurrency int
	RunID       string
	// Out receives trajectories/<instance>.arrow, loc_outputs.jsonl and
	// localize.json (what the run was: checked by a resume).
	Out string
	// Resume continues the run in Out: samples it finished are kept and
	// not played again. Without it, an Out that holds a run is refused.
	Resume   bool
	Progress func(done, total int)
	Log      zerolog.Logger
	// OutageBudget is how long an episode waits out an outage of its model
	// (no server answers) before its job is recorded as an infra_error
	// (default worker.DefaultOutageBudget); meanwhile it is played again
	// from the start whenever a server answers.
	OutageBudget time.Duration
	// Grace is how long running episodes may finish after ctx is done
	// (a stop request) before they are cancelled (0: at once; the command
	// line's default is DefaultLocalizeGrace); Abort, when closed, cancels
	// them at once.
	Grace time.Duration
	Abort <-chan struct{}
}

// DefaultLocalizeGrace is how long `a2farm localize` lets running
// episodes finish after a stop request.
const DefaultLocalizeGrace = 10 * time.Second

func (c *LocalizeConfig) validate() error {
	switch {
	case c.Repos == nil || c.Policies == nil:
		return errors.New("localize: repositories and policies are required")
	case c.Index.Languages.Len() == 0:
		return errors.New("localize: no language to index repositories with (Index.Languages)")
	case c.Samples < 1 || c.Samples > MaxSamples:
		return fmt.Errorf("samples must be 1 to %d, got %d", MaxSamples, c.Samples)
	case c.Out == "":
		return errors.New("an output folder is required (--out)")
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency must be >= 0, got %d", c.Concurrency)
	case c.Grace < 0:
		return fmt.Errorf("grace must be >= 0, got %s", c.Grace)
	case c.FirstSample < 0:
		return fmt.Errorf("first sample must be >= 0, got %d", c.FirstSample)
	case c.FirstSample > 0 && c.Spec.Branching.On():
		return errors.New("localize: branching plans from samples 0..N-1; FirstSample must be 0")
	}
	return nil
}

// LocalizeResult is what a localization run played: every trajectory of
// Out (those a resume kept first), and how many samples the run asked for.
type LocalizeResult struct {
	Trajectories []schema.Trajectory
	// Resumed are the trajectories an earlier run had finished.
	Resumed int
	// Wanted counts the base samples asked for (instances × samples);
	// Finished those with a trajectory.
	Wanted, Finished int
}

// ErrInterrupted is returned (wrapping the context's error) when a stop
// request ended the run before every sample was played; everything that
// finished is written.
var ErrInterrupted = errors.New("interrupted")

// Localize runs every instance × sample and writes the trajectories and
// predictions. Instances whose index cannot be built are logged and
// recorded as infra_error trajectories. A stop request (ctx done) starts
// no new episode, lets running ones finish within the grace and writes
// everything that finished, then returns ErrInterrupted.
func Localize(ctx context.Context, cfg LocalizeConfig) (LocalizeResult, error) {
	if err := cfg.validate(); err != nil {
		return LocalizeResult{}, err
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
			return LocalizeResult{}, err
		}
	}
	done, err := openLocalizeOut(cfg.Out, localizeManifest{RunID: cfg.RunID, Samples: cfg.Samples, FirstSample: cfg.FirstSample, Spec: cfg.Spec}, cfg.Resume)
	if err != nil {
		return LocalizeResult{}, err
	}
	trajDir := filepath.Join(cfg.Out, "trajectories")
	// Episodes run under workCtx: a stop request (ctx) starts nothing
	// new, and cancels what runs only after the grace or a second request.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	go func() {
		select {
		case <-ctx.Done():
		case <-workCtx.Done():
			return
		}
		cfg.Log.Warn().Dur("grace", cfg.Grace).Msg("stopping: no new episodes; running ones may finish within the grace (interrupt again to stop now)")
		select {
		case <-time.After(cfg.Grace):
			cfg.Log.Warn().Msg("grace over; cancelling the running episodes")
		case <-cfg.Abort:
		case <-workCtx.Done():
		}
		cancelWork()
	}()

	// Branches join the total as they are planned.
	var total atomic.Int64
	total.Store(int64(len(cfg.Instances) * cfg.Samples))
	results := make([][]schema.Trajectory, len(cfg.Instances))
	var finished atomic.Int64
	var progressMu sync.Mutex
	failures := &firstFailures{log: cfg.Log, seen: map[schema.Status]bool{}}
	p := &localProgress{total: &total, tick: func(tr schema.Trajectory) {
		failures.observe(tr)
		progressMu.Lock()
		defer progressMu.Unlock()
		n := finished.Add(1)
		if cfg.Progress != nil {
			cfg.Progress(int(n), int(total.Load()))
		}
	}}
	resumed := 0
	for _, trs := range done {
		resumed += len(trs)
	}
	finished.Store(int64(resumed))
	// Instances run a few at a time; each shares one index among its
	// samples, which run in parallel.
	perInstance := min(cfg.Samples, cfg.Concurrency)
	g, gctx := errgroup.WithContext(workCtx)
	g.SetLimit(max(1, cfg.Concurrency/perInstance))
	for i, inst := range cfg.Instances {
		if ctx.Err() != nil {
			break // a stop request: no new instance
		}
		g.Go(func() error {
			prior := done[inst.InstanceID]
			trs, err := cfg.runInstance(ctx, gctx, inst, prior, perInstance, p)
			if err != nil {
				return err
			}
			results[i] = trs
			if len(trs) == len(prior) {
				return nil // nothing new to write
			}
			return writeTrajectories(filepath.Join(trajDir, safeName(inst.InstanceID)+".arrow"), trs)
		})
	}
	err = g.Wait()
	if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return LocalizeResult{}, err
	}
	res := LocalizeResult{Resumed: resumed, Wanted: len(cfg.Instances) * cfg.Samples}
	for i, trs := range results {
		if trs == nil { // not started: what an earlier run finished stands
			trs = done[cfg.Instances[i].InstanceID]
		}
		res.Trajectories = append(res.Trajectories, trs...)
	}
	for _, tr := range res.Trajectories {
		if !tr.Fork.IsBranch() {
			res.Finished++
		}
	}
	if err := writeLocOutputs(filepath.Join(cfg.Out, "loc_outputs.jsonl"), res.Trajectories); err != nil {
		return res, err
	}
	if ctx.Err() != nil && res.Finished < res.Wanted {
		return res, fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
	}
	return res, nil
}

// localProgress counts finished rollouts against a total that grows as
// branches are planned.
type localProgress struct {
	total *atomic.Int64
	tick  func(schema.Trajectory)
}

// firstFailures logs the first trajectory of each failing status as it
// happens, so that a run whose every episode fails says why at once.
type firstFailures struct {
	mu   sync.Mutex
	log  zerolog.Logger
	seen map[schema.Status]bool
}

func (f *firstFailures) observe(tr schema.Trajectory) {
	if tr.Status == schema.StatusOK || tr.Status == schema.StatusTruncated {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[tr.Status] {
		return
	}
	f.seen[tr.Status] = true
	f.log.Warn().Str("instance", tr.InstanceID).Int64("sample", tr.Sample).Str("error", tr.Error).
		Msgf("first %s (later ones of this kind are counted, not logged)", tr.Status)
}

// runInstance plays an instance's base samples on one index, then, when
// the run branches, the branches planned from them, each replaying its
// parent's record in memory. stop is the run's stop request, ctx the
// episodes' context; prior are the trajectories an earlier run finished,
// which are kept and not played again. When stopped it returns what
// finished.
func (cfg *LocalizeConfig) runInstance(stop, ctx context.Context, inst schema.Instance, prior []schema.Trajectory, parallel int, p *localProgress) ([]schema.Trajectory, error) {
	have := make(map[string]bool, len(prior))
	for _, tr := range prior {
		have[tr.JobID] = true
	}
	var jobs []schema.Job
	for s := range cfg.Samples {
		if job := cfg.Spec.Job(cfg.RunID, 0, inst, cfg.FirstSample+int64(s)); !have[job.JobID] {
			jobs = append(jobs, job)
		}
	}
	trs := slices.Clone(prior)
	if len(jobs) == 0 && !cfg.Spec.Branching.On() {
		return trs, nil // an earlier run finished this instance
	}
	opts, err := cfg.Index.For(inst.Languages)
	if err != nil {
		return trs, fmt.Errorf("%s: %w", inst.InstanceID, err)
	}
	commit, err := cfg.Repos.Snapshot(inst.Repo, inst.BaseCommit, inst.BasePatch, inst.InstanceID)
	if err != nil {
		return trs, fmt.Errorf("%s: %w", inst.InstanceID, err)
	}
	idx, err := repoindex.Build(stop, cfg.Repos, inst.Repo, commit, opts)
	switch {
	case err != nil && (stop.Err() != nil || len(jobs) == 0):
		return trs, nil // stopped, or only branches left, which need the index
	case err != nil:
		cfg.Log.Error().Err(err).Str("instance", inst.InstanceID).Msg("index build failed; recording infra_error trajectories")
		for _, job := range jobs {
			tr := job.InfraError(err.Error(), time.Now().UTC())
			trs = append(trs, tr)
			p.tick(tr)
		}
		return trs, nil
	}
	defer idx.Close()
	played, err := cfg.playAll(stop, ctx, jobs, nil, idx, parallel, p.tick)
	trs = append(trs, played...)
	if err != nil || stop.Err() != nil {
		return trs, err
	}
	return cfg.branch(stop, ctx, inst, trs, idx, parallel, p)
}

// branch plays the branches planned from an instance's base samples that
// trs does not hold yet.
func (cfg *LocalizeConfig) branch(stop, ctx context.Context, inst schema.Instance, trs []schema.Trajectory, idx *repoindex.Index, parallel int, p *localProgress) ([]schema.Trajectory, error) {
	if !cfg.Spec.Branching.On() {
		return trs, nil
	}
	base := make([]schema.Trajectory, 0, cfg.Samples)
	have := map[string]bool{}
	for _, tr := range trs {
		have[tr.JobID] = true
		if !tr.Fork.IsBranch() {
			base = append(base, tr)
		}
	}
	if len(base) < cfg.Samples {
		return trs, nil // branches are planned from every base sample
	}
	slices.SortFunc(base, func(a, b schema.Trajectory) int { return cmp.Compare(a.Sample, b.Sample) })
	points := branch.Plan(cfg.Spec.Branching, base)
	var forks []schema.Job
	for _, job := range branch.Jobs(cfg.Spec, cfg.RunID, 0, inst, cfg.Samples, points, nil) {
		if !have[job.JobID] {
			forks = append(forks, job)
		}
	}
	p.total.Add(int64(len(forks)))
	parents := make([]*schema.Trajectory, len(forks))
	for i, job := range forks {
		parents[i] = &base[job.Fork.ParentSample]
	}
	branches, err := cfg.playAll(stop, ctx, forks, parents, idx, parallel, p.tick)
	return append(trs, branches...), err
}

// playAll plays jobs on idx, parallel at a time; parents[i] is the record
// job i replays (nil: base samples). After a stop request no job starts,
// and a job its cancellation cut short is left out: it returns the
// trajectories that finished, in job order.
func (cfg *LocalizeConfig) playAll(stop, ctx context.Context, jobs []schema.Job, parents []*schema.Trajectory, idx *repoindex.Index,
	parallel int, tick func(schema.Trajectory)) ([]schema.Trajectory, error) {
	trs := make([]schema.Trajectory, len(jobs))
	played := make([]bool, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, job := range jobs {
		if stop.Err() != nil {
			break
		}
		g.Go(func() error {
			if stop.Err() != nil {
				return nil // stopped while it waited for a slot
			}
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
				if stop.Err() != nil && errors.Is(err, context.Canceled) {
					return nil // cut short by the stop: not a finished sample
				}
				return err
			}
			trs[i], played[i] = tr, true
			tick(tr)
			return nil
		})
	}
	err := g.Wait()
	var out []schema.Trajectory
	for i, ok := range played {
		if ok {
			out = append(out, trs[i])
		}
	}
	return out, err
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
			row := tr.LocOutput()
			row.Files, row.Modules, row.Entities = nonNil(row.Files), nonNil(row.Modules), nonNil(row.Entities)
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

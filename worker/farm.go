package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/policy"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// Policies builds the model that plays a job from the job's policy; an
// error wrapping policy.ErrUnservable says this process cannot serve it.
// policy.Registry implements it.
type Policies interface {
	Model(job schema.Job) (agent.Model, error)
	// Offers lists what it can play, as heartbeats advertise it.
	Offers() []string
	// Outage reports whether no server of the job's model answers, and
	// since when; AllOut whether that holds for every remote model served.
	Outage(job schema.Job) (since time.Time, out bool)
	AllOut() (since time.Time, out bool)
	// Probe asks failing servers whether they answer again.
	Probe(ctx context.Context)
	// Replicas reports the policy servers, for heartbeats.
	Replicas() []policy.ReplicaStats
}

// Config configures a farm worker.
type Config struct {
	Bus   *bus.Bus
	Repos *gitrepo.Set
	// Policies plays each job with the policy the job names; a worker owns
	// only where models are served.
	Policies Policies
	Index    repoindex.BuildOptions
	// Concurrency bounds episodes in flight (default 32: the policy is
	// remote I/O).
	Concurrency int
	// Grace is how long in-flight episodes may run after a stop request
	// before they are cancelled and their jobs handed back (default 30 s).
	Grace time.Duration
	// Abort, when closed, ends the grace at once (a second stop request).
	Abort <-chan struct{}
	// KeepIndexes is how many snapshot indexes stay open after their last
	// episode ends, for the next job on the same snapshot (default 4; -1
	// keeps none). The N samples of an issue arrive one by one, so without
	// this a worker that finishes a sample before the next one arrives
	// rebuilds the index for every sample.
	KeepIndexes int
	// IndexMemory bounds the memory of the indexes the worker holds open
	// (repoindex.Index.Bytes, default 4 GiB): indexes no episode uses are
	// closed, least recently used first, until the open ones fit. Indexes
	// in use are never closed, so the bound holds whenever the episodes
	// in flight fit in it.
	IndexMemory int64
	// OutageBudget is how long a job waits out an outage of its model (no
	// replica answers) before it is given up (default 30 minutes): until
	// then it is put back with a growing delay, never answered.
	OutageBudget time.Duration
	WorkerID     string
	Version      string
	Log          zerolog.Logger
	// OnTrajectory sees every trajectory once it is published (metrics).
	OnTrajectory func(schema.Trajectory)
	// LocalIndexes builds every index on this worker and shares none;
	// by default a worker fetches the indexes another worker of the farm
	// built (or builds and shares them), through the farm's index store.
	LocalIndexes bool
	// OnIndex sees every snapshot index the worker opens, and where it
	// came from: repoindex.SourceBuilt, SourceCache or SourceShared
	// (metrics).
	OnIndex func(took time.Duration, from string, err error)
	// OnIndexMemory sees the open indexes whenever they change: how many,
	// their estimated bytes and the IndexMemory budget (metrics).
	OnIndexMemory func(open int, bytes, budget int64)
	// OnHandOff sees every job this worker handed to another, and why:
	// HandOffSnapshot or HandOffPolicy (metrics).
	OnHandOff func(why string)
	// Hooks for tests; nil in production.
	OnJobStarted func(jobID string)
	OnJobSettled func(jobID string, outcome string)
}

// Why a worker hands a job to another: it lacks the job's snapshot, or
// does not serve its policy.
const (
	HandOffSnapshot = "snapshot"
	HandOffPolicy   = "policy"
)

// DefaultIndexMemory is the default budget of a worker's open indexes.
const DefaultIndexMemory = 4 << 30

// DefaultOutageBudget is how long a job waits out its model's outage.
const DefaultOutageBudget = 30 * time.Minute

func (c *Config) validate() error {
	if c.Bus == nil || c.Repos == nil || c.Policies == nil {
		return errors.New("worker: a bus, repositories and policies are required")
	}
	if c.Index.Languages.Len() == 0 {
		return errors.New("worker: no language to index repositories with (Index.Languages)")
	}
	if c.Concurrency < 0 || c.Grace < 0 || c.KeepIndexes < -1 || c.IndexMemory < 0 || c.OutageBudget < 0 {
		return errors.New("worker: concurrency, grace, index memory and outage budget must not be negative, keep-indexes not below -1")
	}
	if c.IndexMemory == 0 {
		c.IndexMemory = DefaultIndexMemory
	}
	if c.OutageBudget <= 0 {
		c.OutageBudget = DefaultOutageBudget
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Grace == 0 {
		c.Grace = 30 * time.Second
	}
	switch c.KeepIndexes {
	case 0:
		c.KeepIndexes = 4
	case -1:
		c.KeepIndexes = 0
	}
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return nil
}

// Run pulls jobs until ctx is cancelled, then stops in two phases: it
// stops pulling, lets running episodes finish for the grace period, and
// then cancels them and hands their jobs back (Nak) for another worker.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	cleanup, err := shareIndexes(&cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	// A server that refuses for good stops the worker as a stop request
	// would, and Run returns why.
	var stopErr error
	ctx, stopPulling := context.WithCancel(ctx)
	defer stopPulling()
	w := &farmWorker{cfg: cfg, indexes: map[string]*indexEntry{}, lacks: map[string]time.Time{}, beat: make(chan struct{}, 1),
		inbox: &inbox{bus: cfg.Bus, workerID: cfg.WorkerID, log: cfg.Log}}
	// Episodes run under their own context, cancelled only after the
	// grace period, so that a stop request does not cut them short.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	slots := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	// Servers that do not answer are known before the first pull and the
	// first heartbeat, so that their jobs are left to workers whose
	// servers do.
	cfg.Policies.Probe(ctx)
	hbDone := make(chan struct{})
	go w.heartbeat(ctx, hbDone)
	probeDone := make(chan struct{})
	go w.probe(ctx, probeDone)
	// dispatch plays a pulled job in its slot.
	dispatch := func(msg jetstream.Msg) {
		if ctx.Err() != nil { // stopping: a job that arrives now goes straight back
			_ = msg.Nak()
			<-slots
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			w.handle(workCtx, msg)
		}()
	}
	for ctx.Err() == nil {
		if w.pauseForOutage(ctx) {
			continue
		}
		// Take every free slot (at least one) and ask for that many jobs
		// in one pull: one round trip per batch, not per job.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		want := 1
	fill:
		for want < cap(slots) {
			select {
			case slots <- struct{}{}:
				want++
			default:
				break fill
			}
		}
		// Jobs handed to this worker come first: another worker chose it
		// to play them.
		got := 0
		for _, msg := range w.inbox.take(ctx, want) {
			got++
			dispatch(msg)
		}
		if got < want {
			batch, err := cfg.Bus.Consumer.Fetch(want-got, jetstream.FetchMaxWait(2*time.Second))
			if bus.Permanent(err) && ctx.Err() == nil {
				// The server will never hand this worker a job: stop as on
				// a stop request, and say why.
				stopErr = fmt.Errorf("pull jobs: %w", err)
				stopPulling()
			}
			if err != nil {
				if ctx.Err() == nil {
					cfg.Log.Warn().Err(err).Msg("pull failed; retrying")
					time.Sleep(time.Second)
				}
			} else {
				for msg := range batch.Messages() {
					got++
					dispatch(msg)
				}
				if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) &&
					!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
					cfg.Log.Warn().Err(err).Msg("pull ended early")
				}
			}
		}
		for range want - got { // slots the pulls did not fill
			<-slots
		}
	}
	// Phase two: wait for the grace period, then cancel what still runs.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.Grace):
		cfg.Log.Warn().Msg("grace period over; cancelling running episodes and handing their jobs back")
		cancelWork()
		<-done
	case <-cfg.Abort:
		cfg.Log.Warn().Msg("stopping now; cancelling running episodes and handing their jobs back")
		cancelWork()
		<-done
	}
	<-hbDone
	<-probeDone
	w.closeIndexes()
	return stopErr
}

// probeEvery is how often failing policy servers are asked whether they
// answer again (each backs off on its own; most asks probe nothing).
const probeEvery = time.Second

// probe brings failing policy servers back as they answer, until ctx ends.
func (w *farmWorker) probe(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.cfg.Policies.Probe(ctx)
		}
	}
}

// pauseForOutage holds the pull loop while no server of any model this
// worker serves answers (a pulled job could only be put back), for at
// most a probe interval; it reports whether it paused. Past the outage
// budget the worker pulls again, to give those jobs up with the reason.
func (w *farmWorker) pauseForOutage(ctx context.Context) bool {
	since, out := w.cfg.Policies.AllOut()
	if !out || time.Since(since) >= w.cfg.OutageBudget {
		if w.paused.Swap(false) {
			w.cfg.Log.Info().Msg("a policy server answers again; pulling jobs")
			w.beatNow()
		}
		return false
	}
	if !w.paused.Swap(true) {
		w.cfg.Log.Warn().Time("since", since).Dur("budget", w.cfg.OutageBudget).
			Msg("no policy server answers; not pulling jobs until one does")
		w.beatNow()
	}
	select {
	case <-ctx.Done():
	case <-time.After(probeEvery):
	}
	return true
}

// tempCacheBytes bounds the index cache of a worker given no --cache: it
// holds the bundles fetched from the farm, which the worker installs there.
const tempCacheBytes = 8 << 30

// shareIndexes connects the worker to the farm's index store, unless it
// keeps its indexes local or the farm has none. Fetched indexes are
// installed in the host's cache, or without one in a temporary cache that
// cleanup removes.
func shareIndexes(cfg *Config) (cleanup func(), err error) {
	cleanup = func() {}
	if cfg.LocalIndexes {
		return cleanup, nil
	}
	shared, ok := cfg.Bus.SharedIndexes(cfg.WorkerID)
	if !ok {
		cfg.Log.Warn().Msg("this farm has no shared index store (made by an older a2farm): every worker builds every index; `a2farm farm init` adds it")
		return cleanup, nil
	}
	if cfg.Index.Cache == nil {
		dir, err := os.MkdirTemp("", "a2farm-worker-cache-*")
		if err != nil {
			return nil, fmt.Errorf("worker: index cache: %w", err)
		}
		if cfg.Index.Cache, err = repoindex.OpenCache(dir, tempCacheBytes); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
	}
	cfg.Index.Shared = shared
	return cleanup, nil
}

type farmWorker struct {
	cfg    Config
	mu     sync.Mutex
	active int
	// done counts episodes played to a published trajectory, handedOff
	// jobs passed to another worker (heartbeats report both).
	done, handedOff int64
	indexes         map[string]*indexEntry
	// idle holds the keys of built indexes no episode uses, least
	// recently released first; at most cfg.KeepIndexes of them.
	idle []string
	// indexBytes is the estimated memory of every open index (in use or
	// idle), bounded by cfg.IndexMemory as far as idle ones can be closed.
	indexBytes int64
	// lacks holds the snapshots ("owner/name@commit") this worker found
	// missing from its repositories, and when; heartbeats advertise them
	// so that others pass such jobs on, and status shows them.
	lacks map[string]time.Time
	// beat asks for a heartbeat now: what the worker lacks changed.
	beat chan struct{}
	// paused is set while the pull loop waits out a policy outage.
	paused atomic.Bool
	// inbox holds the jobs other workers handed to this one.
	inbox *inbox
}

type indexEntry struct {
	ready chan struct{}
	idx   *repoindex.Index
	bytes int64 // idx.Bytes(), counted in farmWorker.indexBytes
	err   error
	refs  int
}

// index returns the shared index of a snapshot, building it once; release
// drops the reference. An index no episode uses stays open among the
// KeepIndexes most recently released ones while the open indexes fit in
// IndexMemory; beyond either bound the least recently used is closed.
//
// An index is a snapshot read with a set of languages (opts, a job's): the
// same snapshot read with another set is another index.
func (w *farmWorker) index(ctx context.Context, repo, commit string, opts repoindex.BuildOptions) (*repoindex.Index, func(), error) {
	key := indexKey(repo, commit, opts.Languages)
	w.mu.Lock()
	e, ok := w.indexes[key]
	if !ok {
		e = &indexEntry{ready: make(chan struct{})}
		w.indexes[key] = e
		go func() {
			start := time.Now()
			e.idx, e.err = repoindex.Build(ctx, w.cfg.Repos, repo, commit, opts)
			from := ""
			if e.err == nil {
				from = e.idx.Source()
				if e.idx.ShareErr != nil {
					w.cfg.Log.Warn().Err(e.idx.ShareErr).Str("snapshot", key).Msg("built an index the farm's other workers cannot fetch; they will build it too")
				}
			}
			if w.cfg.OnIndex != nil {
				w.cfg.OnIndex(time.Since(start), from, e.err)
			}
			if e.err == nil {
				e.bytes = e.idx.Bytes()
				w.mu.Lock()
				w.indexBytes += e.bytes
				evicted := w.evictLocked()
				w.mu.Unlock()
				w.closeAll(evicted)
			}
			close(e.ready)
		}()
	} else if e.refs == 0 {
		w.idle = slices.DeleteFunc(w.idle, func(k string) bool { return k == key })
	}
	e.refs++
	w.mu.Unlock()
	<-e.ready
	release := func() {
		var evicted []*repoindex.Index
		w.mu.Lock()
		e.refs--
		switch {
		case e.refs > 0:
		case e.err != nil: // a failed build is tried again by the next job
			delete(w.indexes, key)
		default:
			w.idle = append(w.idle, key)
			evicted = w.evictLocked()
		}
		w.mu.Unlock()
		w.closeAll(evicted)
	}
	if e.err != nil {
		release()
		return nil, nil, e.err
	}
	return e.idx, release, nil
}

// evictLocked takes out of w.indexes the idle indexes beyond KeepIndexes
// and, least recently used first, those that keep the open ones over
// IndexMemory; the caller closes them after unlocking w.mu.
func (w *farmWorker) evictLocked() []*repoindex.Index {
	var evicted []*repoindex.Index
	for len(w.idle) > 0 && (len(w.idle) > w.cfg.KeepIndexes || w.indexBytes > w.cfg.IndexMemory) {
		oldest := w.idle[0]
		w.idle = w.idle[1:]
		e := w.indexes[oldest]
		evicted = append(evicted, e.idx)
		w.indexBytes -= e.bytes
		delete(w.indexes, oldest)
	}
	return evicted
}

// closeAll closes evicted indexes and reports the open ones. Closing
// flushes the search index: never while holding the lock every job and
// the heartbeat need.
func (w *farmWorker) closeAll(evicted []*repoindex.Index) {
	for _, idx := range evicted {
		idx.Close()
	}
	if w.cfg.OnIndexMemory != nil {
		w.mu.Lock()
		open, bytes, budget := w.indexMemory()
		w.mu.Unlock()
		w.cfg.OnIndexMemory(open, bytes, budget)
	}
}

// indexMemory reports the open indexes: how many, their estimated bytes
// and the budget. The caller holds w.mu.
func (w *farmWorker) indexMemory() (open int, bytes, budget int64) {
	for _, e := range w.indexes {
		if e.idx != nil {
			open++
		}
	}
	return open, w.indexBytes, w.cfg.IndexMemory
}

// indexKey names an index among a worker's: a snapshot and the languages
// it is read with.
func indexKey(repo, commit string, l *lang.Set) string {
	return repo + "@" + commit + "/" + l.Key()
}

// closeIndexes closes every index once no episode runs.
func (w *farmWorker) closeIndexes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, e := range w.indexes {
		<-e.ready
		if e.idx != nil {
			e.idx.Close()
		}
		delete(w.indexes, key)
	}
	w.idle = nil
	w.indexBytes = 0
}

// handle runs one job and settles its message by the outcome.
func (w *farmWorker) handle(ctx context.Context, msg jetstream.Msg) {
	w.mu.Lock()
	w.active++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.active--
		w.mu.Unlock()
	}()
	job, err := bus.DecodeJob(msg)
	if err == nil && w.cfg.OnJobStarted != nil {
		w.cfg.OnJobStarted(job.JobID)
	}
	if err != nil {
		err = Permanent(err)
	} else {
		err = w.runJob(ctx, job, msg)
	}
	outcome := "ack"
	f, delay := decide(err)
	if (f == fateNak || f == fateNakDelay) && ctx.Err() == nil && bus.FromInbox(msg) && delivered(msg, 0) >= w.cfg.Bus.MaxDeliver() {
		// An inbox has no delivery limit: a job that keeps failing on the
		// worker it was handed to goes back to the shared queue, where
		// any worker may play it and the limit and dead letters apply.
		if merr := w.cfg.Bus.MoveToQueue(context.WithoutCancel(ctx), job, bus.Declined(msg)); merr == nil {
			w.cfg.Log.Warn().Err(err).Str("job", job.JobID).Msg("a job handed to this worker keeps failing; moved back to the queue")
			f = fateAck
		}
	}
	switch f {
	case fateAck:
		err = msg.DoubleAck(context.WithoutCancel(ctx))
	case fateTerm:
		outcome = "term"
		w.cfg.Log.Error().Err(err).Str("job", job.JobID).Msg("terminating a job that cannot succeed")
		err = msg.TermWithReason(err.Error())
	case fateNakDelay:
		outcome = "nak"
		w.cfg.Log.Warn().Err(err).Str("job", job.JobID).Msg("handing the job back")
		err = msg.NakWithDelay(delay)
	default:
		outcome = "nak"
		w.cfg.Log.Warn().Err(err).Str("job", job.JobID).Msg("handing the job back")
		err = msg.Nak()
	}
	if err != nil {
		w.cfg.Log.Warn().Err(err).Str("job", job.JobID).Msg("settling the message failed; it will be redelivered")
	}
	if w.cfg.OnJobSettled != nil {
		w.cfg.OnJobSettled(job.JobID, outcome)
	}
}

// runJob plays the episode and publishes its trajectory; the caller acks
// only after this returns nil, so a trajectory is durable before its job
// leaves the queue.
func (w *farmWorker) runJob(ctx context.Context, job schema.Job, msg jetstream.Msg) error {
	model, err := w.cfg.Policies.Model(job)
	if err != nil {
		return w.cannotServe(ctx, job, msg, err)
	}
	var parent *schema.Trajectory
	if job.Fork.IsBranch() {
		rec, err := w.cfg.Bus.TrajectoryAt(ctx, job.Fork.LogSeq)
		if err == nil && rec.JobID != job.Fork.ParentJobID {
			err = fmt.Errorf("log message %d holds %s: %w", job.Fork.LogSeq, rec.JobID, bus.ErrRecordGone)
		}
		if errors.Is(err, bus.ErrRecordGone) {
			return w.giveUp(ctx, job, delivered(msg, 1), fmt.Sprintf("the record of parent %s is gone: %v", job.Fork.ParentJobID, err))
		}
		if err != nil {
			return RetryAfter(err, 5*time.Second)
		}
		parent = &rec
	}
	opts, err := w.cfg.Index.For(job.Languages)
	if err != nil {
		return w.giveUp(ctx, job, delivered(msg, 1), "this worker cannot read the job's languages: "+err.Error())
	}
	commit, err := w.cfg.Repos.Snapshot(job.Repo, job.BaseCommit, job.BasePatch, job.InstanceID)
	switch {
	case errors.Is(err, gitrepo.ErrNotFound):
		return w.lacksSnapshot(ctx, job, msg, err)
	case err != nil: // the base patch does not apply: no worker can play it
		return w.giveUp(ctx, job, delivered(msg, 1), "the snapshot cannot be made: "+err.Error())
	}
	stopProgress := bus.KeepAlive(w.cfg.Bus.AckWait(), msg)
	idx, release, err := w.index(ctx, job.Repo, commit, opts)
	stopProgress()
	if err != nil {
		if errors.Is(err, gitrepo.ErrNotFound) {
			return w.lacksSnapshot(ctx, job, msg, err)
		}
		return RetryAfter(err, 10*time.Second)
	}
	defer release()
	tr, err := play(ctx, job, parent, idx, model, w.cfg.WorkerID, func(schema.Turn) { _ = msg.InProgress() })
	if errors.Is(err, agent.ErrUnavailable) {
		return w.outage(ctx, job, msg, err)
	}
	if err != nil {
		return err // bad tools: terminate; cancelled: hand the job back
	}
	if err := w.cfg.Bus.PublishTrajectory(context.WithoutCancel(ctx), tr); err != nil {
		return RetryAfter(err, 5*time.Second)
	}
	w.mu.Lock()
	w.done++
	w.mu.Unlock()
	if w.cfg.OnTrajectory != nil {
		w.cfg.OnTrajectory(tr)
	}
	return nil
}

// Outage delays: a job whose model is out is put back after a delay that
// doubles with its deliveries, from outageDelay up to maxOutageDelay.
const (
	outageDelay    = 5 * time.Second
	maxOutageDelay = 2 * time.Minute
)

// outage settles a job whose model no server answered: the episode is
// abandoned and nothing is published. Within the outage budget the job
// is put back with a growing delay; on its last delivery it is queued
// afresh instead (an outage must not spend its deliveries). Past the
// budget it is given up with the reason.
func (w *farmWorker) outage(ctx context.Context, job schema.Job, msg jetstream.Msg, why error) error {
	since, out := w.cfg.Policies.Outage(job)
	if !out {
		since = time.Now() // a server answers again: the next try plays it
	}
	if !job.OutageSince.IsZero() && job.OutageSince.Before(since) {
		since = job.OutageSince
	}
	if lasted := time.Since(since); lasted >= w.cfg.OutageBudget {
		return w.giveUp(ctx, job, delivered(msg, 1), fmt.Sprintf("no server of model %q answered for %s (outage budget %s): %v",
			job.Policy.Model, lasted.Round(time.Second), w.cfg.OutageBudget, why))
	}
	deliveries := delivered(msg, 1)
	if deliveries < w.cfg.Bus.MaxDeliver() {
		return RetryAfter(why, min(maxOutageDelay, outageDelay<<min(deliveries-1, 10)))
	}
	job.OutageSince = since
	if err := w.cfg.Bus.Requeue(context.WithoutCancel(ctx), job); err != nil {
		return RetryAfter(err, outageDelay)
	}
	return nil
}

// cannotServe settles a job whose policy this worker cannot play: it never
// plays it with another policy. While another live worker offers the
// policy, the job is handed to it; otherwise the job is given up with the
// reason, which its infra_error trajectory (recorded by the learner) and
// its dead letter (shown by status, requeued by `jobs retry` once a worker
// serves it) carry.
func (w *farmWorker) cannotServe(ctx context.Context, job schema.Job, msg jetstream.Msg, why error) error {
	ctx = context.WithoutCancel(ctx)
	handed, err := w.handOff(ctx, job, msg, HandOffPolicy, func(hb bus.Heartbeat) bool { return policy.Offered(hb.Policies, job.Policy) })
	if handed || err != nil {
		return err
	}
	return w.giveUp(ctx, job, delivered(msg, 1), fmt.Sprintf("worker %s cannot serve the job's policy: %v", w.cfg.WorkerID, why))
}

// delivered is how many times the job's message has been delivered, or
// fallback when the server's metadata is unreadable.
func delivered(msg jetstream.Msg, fallback int) int {
	if md, err := msg.Metadata(); err == nil {
		return int(md.NumDelivered)
	}
	return fallback
}

// giveUp settles a job that no worker can ever play, with the reason: an
// infra_error trajectory and a dead letter.
func (w *farmWorker) giveUp(ctx context.Context, job schema.Job, deliveries int, reason string) error {
	ctx = context.WithoutCancel(ctx)
	if err := w.cfg.Bus.GiveUp(ctx, job, deliveries, reason); err != nil {
		return RetryAfter(fmt.Errorf("give up %s: %w", job.JobID, err), 5*time.Second)
	}
	w.cfg.Log.Error().Str("job", job.JobID).Str("reason", reason).Msg("job given up")
	return nil
}

// lacksForget is how long a worker remembers, and advertises, a snapshot
// it did not have (a mirror may be updated meanwhile).
const lacksForget = 10 * time.Minute

// lacksSnapshot settles a job whose repository or commit this worker does
// not have. It is handed to a live worker that has not said it lacks the
// snapshot (its inbox keeps the job for it while it is busy; no delivery
// spent); with none, the job waits in the queue for one (a delayed
// redelivery) and is given up, with the reason, only on its last
// delivery — then `jobs retry` requeues it.
func (w *farmWorker) lacksSnapshot(ctx context.Context, job schema.Job, msg jetstream.Msg, why error) error {
	snapshot := job.Repo + "@" + job.BaseCommit
	w.mu.Lock()
	_, known := w.lacks[snapshot]
	w.lacks[snapshot] = time.Now()
	w.mu.Unlock()
	if !known {
		w.beatNow() // tell the others at once, so that they do not pass it here
	}
	ctx = context.WithoutCancel(ctx)
	handed, err := w.handOff(ctx, job, msg, HandOffSnapshot, func(hb bus.Heartbeat) bool { return !slices.Contains(hb.Lacks, snapshot) })
	if handed || err != nil {
		return err
	}
	deliveries := delivered(msg, w.cfg.Bus.MaxDeliver())
	if deliveries < w.cfg.Bus.MaxDeliver() {
		return RetryAfter(fmt.Errorf("snapshot %s: %w", snapshot, why), w.cfg.Bus.AckWait())
	}
	return w.giveUp(ctx, job, deliveries, fmt.Sprintf("no live worker has snapshot %s (worker %s: %v)", snapshot, w.cfg.WorkerID, why))
}

// lacking lists the snapshots this worker lacked recently, forgetting old
// ones; the caller holds w.mu.
func (w *farmWorker) lacking() []string {
	var out []string
	for s, at := range w.lacks {
		if time.Since(at) > lacksForget {
			delete(w.lacks, s)
			continue
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// beatNow asks for a heartbeat at once: what others must know changed.
func (w *farmWorker) beatNow() {
	select {
	case w.beat <- struct{}{}:
	default:
	}
}

// heartbeat reports the worker's load until ctx ends, then removes it.
func (w *farmWorker) heartbeat(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	host, _ := os.Hostname()
	every := max(time.Second, w.cfg.Bus.HeartbeatTTL()/3)
	put := func(c context.Context) {
		w.mu.Lock()
		hb := bus.Heartbeat{ID: w.cfg.WorkerID, Host: host, Active: w.active, Capacity: w.cfg.Concurrency, Done: w.done, HandedOff: w.handedOff,
			Version: w.cfg.Version, Policies: w.cfg.Policies.Offers(), Lacks: w.lacking(), Replicas: w.cfg.Policies.Replicas(),
			Updated: time.Now().UTC()}
		hb.Indexes, hb.IndexBytes, hb.IndexBudget = w.indexMemory()
		w.mu.Unlock()
		data, _ := json.Marshal(hb)
		if _, err := w.cfg.Bus.Workers.Put(c, w.cfg.WorkerID, data); err != nil {
			w.cfg.Log.Debug().Err(err).Msg("heartbeat failed")
		}
	}
	put(ctx)
	t := time.NewTicker(every)
	defer t.Stop()
	rescue := time.NewTicker(w.cfg.Bus.HeartbeatTTL())
	defer rescue.Stop()
	for {
		select {
		case <-t.C:
			put(ctx)
		case <-rescue.C:
			// Every worker looks after the inboxes of workers that are
			// gone: nobody else would read them.
			if n, err := w.cfg.Bus.RescueInboxes(ctx); err != nil {
				w.cfg.Log.Debug().Err(err).Msg("rescuing the inboxes of workers that are gone failed")
			} else if n > 0 {
				w.cfg.Log.Info().Int("jobs", n).Msg("moved jobs handed to workers that are gone back to the queue")
			}
		case <-w.beat:
			put(ctx)
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = w.cfg.Bus.Workers.Delete(c, w.cfg.WorkerID)
			cancel()
			return
		}
	}
}

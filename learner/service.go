package learner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
)

// ServiceConfig configures the streaming learner.
type ServiceConfig struct {
	Bus     *bus.Bus
	Out     string // archive/ and shards/ go here
	Learner Config
	// GroupDeadline closes a group that is still missing trajectories
	// this long after its first one arrived (default 30 min).
	GroupDeadline time.Duration
	// Consumer is the durable consumer name (default bus.LearnerConsumer).
	Consumer string
	// ArchiveParallel bounds the archive files written at once (default
	// 16). Each write waits for its sync to reach the disk; writing in
	// parallel overlaps those waits.
	ArchiveParallel int
	// TakeoverAfter is how long a learner that stopped without letting go
	// (a crash) keeps the trajectory log before another learner on the
	// same consumer receives it (default 30 s). Only one learner receives
	// trajectories at a time: the others wait as standbys.
	TakeoverAfter time.Duration
	// AckWait is how long a trajectory delivered to the learner may go
	// unacknowledged before the server delivers it again (default
	// DefaultLearnerAckWait). A delivery lost on the wire — the learner's
	// server stopped while a fetch was answered — comes back only then,
	// and its group waits for it; a batch being archived is kept alive,
	// so a slow disk does not bring redeliveries.
	AckWait time.Duration
	Log     zerolog.Logger
	// OnGroupClosed is told about every group written (tests, metrics).
	OnGroupClosed func(run string, iteration int64, instance string, trajectories, rows int)
}

// DefaultLearnerAckWait is the learner's default ack wait: archiving a
// batch acknowledges it within milliseconds, so a short wait costs
// nothing and bounds how long a lost delivery holds its group back.
const DefaultLearnerAckWait = 10 * time.Second

// groupKey names the trajectories of one instance in one run iteration.
type groupKey struct {
	run       string
	iteration int64
	instance  string
}

type groupState struct {
	first  time.Time
	closed bool
	// A failed close (shard write, no manifest) is retried at retryAt,
	// backing off; failures and lastErr are shown by status.
	failures int
	retryAt  time.Time
	lastErr  string
	// want holds the samples the group closes with, once known: a fork
	// plan is stored once and never changes, so it is read once.
	want map[int64]bool
}

// Serve consumes the trajectory log until ctx ends. Every trajectory is
// archived (one Arrow file per job, written and synced before its message
// is acknowledged, so nothing acknowledged can be lost) and deduplicated
// by job id. When all N trajectories of an instance are in, or the group
// deadline passes, the group's rewards, advantages and weights are
// computed and its shard written. A restart resumes from the archive.
func Serve(ctx context.Context, cfg ServiceConfig) error {
	if cfg.Bus == nil || cfg.Out == "" {
		return errors.New("learner: a bus and an output folder are required")
	}
	// Bad hyperparameters fail now, not at every group close.
	if err := cfg.Learner.Rewards.Validate(); err != nil {
		return &ConfigError{err}
	}
	if err := cfg.Learner.Advantage.Validate(); err != nil {
		return &ConfigError{err}
	}
	cfg = cfg.withDefaults()
	cons, err := cfg.Bus.Traj.CreateOrUpdateConsumer(ctx, cfg.consumer())
	if err != nil {
		return fmt.Errorf("learner consumer: %w", err)
	}
	s := &service{cfg: cfg, groups: map[groupKey]*groupState{}, manifests: map[string]*schema.RunManifest{}}
	s.resume(ctx)
	cfg.Log.Info().Int("groups", len(s.groups)).Dur("takeover_after", cfg.TakeoverAfter).
		Msg("learner ready; waiting for the trajectory log (another learner holds it while it runs, a dead one until --takeover-after)")
	// Jobs that exhaust their deliveries become infra_error trajectories
	// here, so their groups close without waiting for the deadline.
	defer cfg.Bus.StartDeadJobHandler(ctx, cfg.Log)()
	active := false // this learner has received trajectories: it holds the pin
	defer func() {
		if active { // hand over at once instead of after TakeoverAfter
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := cfg.Bus.Traj.UnpinConsumer(c, cfg.Consumer, bus.LearnerGroup); err != nil {
				cfg.Log.Warn().Err(err).Msg("could not hand the trajectory log over; another learner gets it after --takeover-after")
			}
		}
	}()
	defer func() { // the last word on the groups, for status
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		s.publishState(c)
	}()
	lostSince := time.Time{}
	lastState := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastState) >= 2*time.Second {
			s.publishState(ctx)
			lastState = time.Now()
		}
		batch, err := cons.Fetch(64, jetstream.FetchMaxWait(time.Second), jetstream.FetchPriorityGroup(bus.LearnerGroup))
		if err == nil && !lostSince.IsZero() {
			// Acks sent during the outage may be lost (their trajectories
			// come again and are deduplicated) and groups may have
			// completed unseen: check every open group against the archive.
			cfg.Log.Info().Dur("after", time.Since(lostSince).Round(time.Second)).Msg("the NATS server answers again; re-checking open groups")
			lostSince = time.Time{}
			s.recheck(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if bus.Permanent(err) { // waiting would not help: say why and stop
				return fmt.Errorf("read the trajectory log: %w", err)
			}
			if lostSince.IsZero() {
				lostSince = time.Now()
				cfg.Log.Warn().Err(err).Msg("cannot read the trajectory log; retrying until the server answers")
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			s.closeDue(ctx, time.Now())
			continue
		}
		var msgs []jetstream.Msg
		for msg := range batch.Messages() {
			msgs = append(msgs, msg)
		}
		if len(msgs) > 0 && !active {
			active = true
			cfg.Log.Info().Msg("receiving the trajectory log")
		}
		s.takeBatch(ctx, msgs)
		s.closeDue(ctx, time.Now())
	}
	return nil
}

// withDefaults fills in the settings left zero.
func (cfg ServiceConfig) withDefaults() ServiceConfig {
	if cfg.GroupDeadline == 0 {
		cfg.GroupDeadline = 30 * time.Minute
	}
	if cfg.Consumer == "" {
		cfg.Consumer = bus.LearnerConsumer
	}
	if cfg.ArchiveParallel <= 0 {
		cfg.ArchiveParallel = 16
	}
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = 30 * time.Second
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultLearnerAckWait
	}
	return cfg
}

// consumer is the learner's durable consumer on the trajectory log. A
// group needs all its trajectories in one learner, so the consumer pins
// one client: a second learner started by mistake, or as a standby,
// receives nothing until the active one lets go.
func (cfg ServiceConfig) consumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: cfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: cfg.AckWait,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{bus.LearnerGroup}, PinnedTTL: cfg.TakeoverAfter,
	}
}

// ConfigError is a learner configuration that can never work.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return "learner: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

type service struct {
	cfg       ServiceConfig
	mu        sync.Mutex
	groups    map[groupKey]*groupState
	manifests map[string]*schema.RunManifest
}

func (s *service) archivePath(tr schema.Trajectory) string { return ArchivePath(s.cfg.Out, tr) }

func (s *service) groupDir(k groupKey, kind string) string {
	return filepath.Join(s.cfg.Out, kind, bus.Token(k.run), fmt.Sprint(k.iteration), bus.Token(k.instance))
}

// received is a decoded trajectory message.
type received struct {
	msg jetstream.Msg
	tr  schema.Trajectory
}

// takeBatch archives and acknowledges a fetched batch, then closes the
// groups it completed. Archive entries are written in parallel; messages
// for the same entry (a redelivery beside a retried attempt) stay in
// order on one goroutine, since whether the later one replaces the
// earlier depends on it.
func (s *service) takeBatch(ctx context.Context, msgs []jetstream.Msg) {
	stopProgress := bus.KeepAlive(s.cfg.AckWait, msgs...)
	byPath := map[string][]received{}
	var paths []string
	for _, msg := range msgs {
		tr, err := s.cfg.Bus.DecodeTrajectory(ctx, msg)
		if errors.Is(err, bus.ErrPayloadUnavailable) {
			s.cfg.Log.Warn().Err(err).Msg("trajectory payload unavailable for now; it will be redelivered")
			_ = msg.NakWithDelay(5 * time.Second)
			continue
		}
		if err == nil && (tr.JobID == "" || tr.RunID == "") {
			err = errors.New("the trajectory names no job or run")
		}
		if err != nil {
			// Not a trajectory a2farm published: keep it aside for
			// inspection and take it out of the log's way.
			reason := err.Error()
			if qerr := s.cfg.Bus.Quarantine(ctx, msg, reason); qerr != nil {
				s.cfg.Log.Warn().Err(qerr).Msg("quarantining an undecodable message failed; it will be redelivered")
				_ = msg.NakWithDelay(5 * time.Second)
				continue
			}
			s.cfg.Log.Error().Str("subject", msg.Subject()).Str("reason", reason).
				Msg("undecodable message in the trajectory log: moved to the dead letters (a2farm.dead.quarantine.trajectories); it counts nowhere")
			_ = msg.Term()
			continue
		}
		p := s.archivePath(tr)
		if _, ok := byPath[p]; !ok {
			paths = append(paths, p)
		}
		byPath[p] = append(byPath[p], received{msg, tr})
	}
	var mu sync.Mutex
	var touched []groupKey
	seen := map[groupKey]bool{}
	var wg sync.WaitGroup
	slots := make(chan struct{}, s.cfg.ArchiveParallel)
	for _, p := range paths {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			for _, r := range byPath[p] {
				var acked *ackError
				if err := s.take(ctx, p, r); errors.As(err, &acked) {
					s.cfg.Log.Warn().Err(err).Str("job", r.tr.JobID).Msg("trajectory archived; its redelivery will be taken as a duplicate")
				} else if err != nil {
					s.cfg.Log.Warn().Err(err).Str("job", r.tr.JobID).Msg("trajectory not archived; it will be redelivered")
					_ = r.msg.NakWithDelay(5 * time.Second)
					continue
				}
				k := groupKey{r.tr.RunID, r.tr.Iteration, r.tr.InstanceID}
				mu.Lock()
				if !seen[k] {
					seen[k] = true
					touched = append(touched, k)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	stopProgress()
	for _, k := range touched {
		if err := s.closeIfComplete(ctx, k); err != nil {
			s.cfg.Log.Error().Err(err).Str("instance", k.instance).Msg("closing a group failed")
		}
	}
}

// take archives one trajectory at path and acknowledges it.
func (s *service) take(ctx context.Context, path string, r received) error {
	tr := r.tr
	k := groupKey{tr.RunID, tr.Iteration, tr.InstanceID}
	replace, err := s.shouldArchive(path, tr)
	if err != nil {
		return err
	}
	if replace {
		rec := schema.EncodeTrajectories(nil, tr)
		err := atomicfile.Write(path, func(w io.Writer) error { return schema.WriteIPC(w, schema.TrajectorySchema(), rec) })
		rec.Release()
		if err != nil {
			return err
		}
		s.mu.Lock()
		if g, ok := s.groups[k]; ok && g.closed {
			// A retried job replaced a failure: the group is recomputed.
			g.closed = false
			_ = os.RemoveAll(s.groupDir(k, "shards"))
		}
		s.mu.Unlock()
	}
	// The archive file is durable now: the group counts it whether or
	// not the acknowledgement gets through (one lost in an outage only
	// brings a redelivery, archived as a duplicate), so a group completed
	// by it closes now rather than when the redelivery comes.
	s.mu.Lock()
	if _, ok := s.groups[k]; !ok {
		s.groups[k] = &groupState{first: time.Now()}
	}
	s.mu.Unlock()
	if err := r.msg.DoubleAck(ctx); err != nil {
		return &ackError{err}
	}
	return nil
}

// ackError is a trajectory archived whose acknowledgement failed.
type ackError struct{ err error }

func (e *ackError) Error() string {
	return "archived, but the acknowledgement failed: " + e.err.Error()
}
func (e *ackError) Unwrap() error { return e.err }

// closeIfComplete closes a group once all N of its trajectories are
// archived; without a run manifest it closes at its deadline.
func (s *service) closeIfComplete(ctx context.Context, k groupKey) error {
	s.mu.Lock()
	g := s.groups[k]
	closed, backingOff, want := g.closed, time.Now().Before(g.retryAt), g.want
	s.mu.Unlock()
	if closed || backingOff { // before any I/O: most groups a restart finds are closed
		return nil
	}
	if want == nil {
		m, err := s.manifest(ctx, k.run, k.iteration)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil // a run without a manifest: its group closes at the deadline
		}
		if err != nil { // the server or the manifest may come right: ask again
			return s.retryLater(k, g, fmt.Errorf("read the run's manifest: %w", err))
		}
		if want, err = s.expectedSamples(ctx, k, m); err != nil {
			return s.retryLater(k, g, fmt.Errorf("read the instance's fork plan: %w", err))
		}
		if want == nil {
			return nil // a run that branches: its plan is not made yet
		}
		s.mu.Lock()
		g.want = want
		s.mu.Unlock()
	}
	have := s.archived(k)
	for sample := range want {
		if !have[sample] {
			return nil
		}
	}
	return s.closeGroup(ctx, k, g)
}

// expectedSamples are the samples a group closes with: the base samples
// and, when the run branches, the branches of the instance's fork plan —
// nil until the coordinator has stored that plan.
func (s *service) expectedSamples(ctx context.Context, k groupKey, m *schema.RunManifest) (map[int64]bool, error) {
	want := map[int64]bool{}
	for sample := range int64(m.Samples) {
		want[sample] = true
	}
	if !m.Spec.Branching.On() {
		return want, nil
	}
	plan, found, err := s.cfg.Bus.GetForkPlan(ctx, k.run, k.iteration, k.instance)
	if err != nil || !found {
		return nil, err
	}
	for _, j := range plan.Jobs {
		want[j.Sample] = true
	}
	return want, nil
}

// shouldArchive: a new job is archived; a duplicate is not, unless it is a
// later attempt.
func (s *service) shouldArchive(path string, tr schema.Trajectory) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	old, err := schema.ReadTrajectories(f)
	if err != nil || len(old) != 1 {
		return true, nil // a damaged archive entry is rewritten
	}
	// A later attempt (a retried dead letter, an explicit rerun) replaces
	// the archived one, unless it failed for infrastructure reasons where
	// the archived one did not.
	return schema.Supersedes(tr, old[0]), nil
}

func (s *service) manifest(ctx context.Context, run string, iteration int64) (*schema.RunManifest, error) {
	key := fmt.Sprintf("%s/%d", run, iteration)
	s.mu.Lock()
	m, ok := s.manifests[key]
	s.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := s.cfg.Bus.GetRun(ctx, run, iteration)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.manifests[key] = m
	s.mu.Unlock()
	return m, nil
}

// archived are the samples of a group with an archive file.
func (s *service) archived(k groupKey) map[int64]bool {
	entries, _ := os.ReadDir(s.groupDir(k, "archive"))
	out := map[int64]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".arrow")
		if sample, err := strconv.ParseInt(name, 10, 64); ok && err == nil {
			out[sample] = true
		}
	}
	return out
}

// resume picks up the groups archived before a restart: a group with a
// shard is known as closed; one without (the learner stopped between
// archiving and writing its shard) is registered with its oldest archive
// file as its start, and closed now if all its trajectories are in —
// otherwise by its next trajectory or its deadline, as before the restart.
func (s *service) resume(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(s.cfg.Out, "archive", "*", "*", "*"))
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			s.cfg.Log.Warn().Err(err).Str("dir", dir).Msg("cannot read an archived group")
			continue
		}
		var first time.Time
		var sample string
		for _, e := range entries {
			info, err := e.Info()
			if err != nil || !strings.HasSuffix(e.Name(), ".arrow") {
				continue
			}
			if sample == "" || info.ModTime().Before(first) {
				first, sample = info.ModTime(), filepath.Join(dir, e.Name())
			}
		}
		if sample == "" {
			continue
		}
		// The folder names are tokens; the trajectory holds the real ids.
		trs, err := schema.ReadTrajectoryFile(sample)
		if err != nil || len(trs) != 1 {
			s.cfg.Log.Warn().Err(err).Str("file", sample).Msg("unreadable archive entry; its group waits for new trajectories")
			continue
		}
		k := groupKey{trs[0].RunID, trs[0].Iteration, trs[0].InstanceID}
		_, err = os.Stat(filepath.Join(s.groupDir(k, "shards"), shard.ManifestName))
		s.groups[k] = &groupState{first: first, closed: err == nil}
		if err := s.closeIfComplete(ctx, k); err != nil {
			s.cfg.Log.Error().Err(err).Str("instance", k.instance).Msg("closing a resumed group failed")
		}
	}
}

// closeDue closes groups whose deadline passed and retries failed closes
// whose back-off is over.
func (s *service) closeDue(ctx context.Context, now time.Time) {
	s.mu.Lock()
	var due, retry []groupKey
	for k, g := range s.groups {
		switch {
		case g.closed || now.Before(g.retryAt):
		case now.Sub(g.first) >= s.cfg.GroupDeadline:
			due = append(due, k)
		case g.failures > 0:
			retry = append(retry, k)
		}
	}
	s.mu.Unlock()
	for _, k := range due {
		s.mu.Lock()
		g := s.groups[k]
		s.mu.Unlock()
		if err := s.closeGroup(ctx, k, g); err != nil {
			s.cfg.Log.Error().Err(err).Str("instance", k.instance).Msg("closing a group failed")
		}
	}
	for _, k := range retry {
		if err := s.closeIfComplete(ctx, k); err != nil {
			s.cfg.Log.Error().Err(err).Str("instance", k.instance).Msg("closing a group failed")
		}
	}
}

// recheck looks at every open group again (after an outage).
func (s *service) recheck(ctx context.Context) {
	s.mu.Lock()
	var open []groupKey
	for k, g := range s.groups {
		if !g.closed {
			g.retryAt = time.Time{}
			open = append(open, k)
		}
	}
	s.mu.Unlock()
	for _, k := range open {
		if err := s.closeIfComplete(ctx, k); err != nil {
			s.cfg.Log.Error().Err(err).Str("instance", k.instance).Msg("closing a group failed")
		}
	}
}

// closeGroup computes the group's advantages and writes its shard; a
// failure leaves the group open and retries it (retryLater). A shard
// already on disk (a restart) is kept.
func (s *service) closeGroup(ctx context.Context, k groupKey, g *groupState) error {
	if err := s.writeShard(ctx, k); err != nil {
		return s.retryLater(k, g, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g.closed, g.failures, g.retryAt, g.lastErr = true, 0, time.Time{}, ""
	return nil
}

// retryLater leaves a group open after err and has closeDue try it again,
// backing off (1 s, 2 s, 4 s... up to 5 min); status shows the group as
// failing, with err, until it closes.
func (s *service) retryLater(k groupKey, g *groupState, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.failures++
	g.retryAt = time.Now().Add(min(5*time.Minute, time.Second<<min(g.failures-1, 9)))
	g.lastErr = err.Error()
	return fmt.Errorf("group %s/%d/%s (attempt %d, next in %s): %w", k.run, k.iteration, k.instance,
		g.failures, time.Until(g.retryAt).Round(time.Second), err)
}

// writeShard computes a group's advantages and writes its shard.
func (s *service) writeShard(ctx context.Context, k groupKey) error {
	dir := s.groupDir(k, "shards")
	if _, err := os.Stat(filepath.Join(dir, shard.ManifestName)); err == nil {
		return nil
	}
	trs, err := schema.ReadTrajectoryDir(s.groupDir(k, "archive"))
	if err != nil {
		return err
	}
	// Without the instance's gold entry, scoring against none would
	// write a shard of wrong rewards: refuse, and retry later.
	loc, ok, err := s.cfg.Bus.GetGold(ctx, k.run, k.iteration, k.instance)
	if err != nil {
		return fmt.Errorf("no gold for the group: %w", err)
	}
	gold := map[string]schema.Locations{}
	source := map[string]any{"run": k.run, "iteration": k.iteration, "instance": k.instance}
	if ok {
		gold[k.instance] = loc
		// The manifest keeps the gold the rewards were computed against,
		// so that a report can be rebuilt from this folder alone.
		source["gold"] = loc
	}
	res, err := Process(trs, gold, s.cfg.Learner)
	if err != nil {
		return err
	}
	m, _, err := WriteShards(res, s.cfg.Learner, ShardConfig{Dir: dir, Source: source})
	if err != nil {
		return err
	}
	rows := m.Rows
	s.cfg.Log.Info().Str("instance", k.instance).Int("trajectories", len(trs)).Int("rows", rows).Msg("group closed")
	if s.cfg.OnGroupClosed != nil {
		s.cfg.OnGroupClosed(k.run, k.iteration, k.instance, len(trs), rows)
	}
	return nil
}

// publishState reports the groups to status: per run iteration how many
// are seen and sharded, and which are failing to write their shard.
func (s *service) publishState(ctx context.Context) {
	r := &bus.LearnerReport{Updated: time.Now().UTC(), Runs: map[string]*bus.RunShards{}}
	s.mu.Lock()
	for k, g := range s.groups {
		key := bus.RunShardsKey(k.run, k.iteration)
		rs := r.Runs[key]
		if rs == nil {
			rs = &bus.RunShards{}
			r.Runs[key] = rs
		}
		rs.Groups++
		if g.closed {
			rs.Sharded++
		}
		if g.failures > 0 {
			r.Failing = append(r.Failing, bus.FailingGroup{Run: k.run, Iteration: k.iteration, Instance: k.instance,
				Error: g.lastErr, Failures: g.failures, NextRetry: g.retryAt})
		}
	}
	s.mu.Unlock()
	if err := s.cfg.Bus.PutLearnerReport(ctx, r); err != nil && ctx.Err() == nil {
		s.cfg.Log.Debug().Err(err).Msg("could not report the learner's groups")
	}
}

// Package bus is the farm's JetStream topology: the jobs work queue with
// its one shared durable consumer, the trajectory log, dead letters, the
// runs and workers key-value buckets and the payload object store. It is
// the only package that knows subject, stream and bucket names.
package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/schema"
)

// Names of the topology.
const (
	JobsStream      = "A2FARM_JOBS"
	TrajStream      = "A2FARM_TRAJECTORIES"
	DeadStream      = "A2FARM_DEAD"
	WorkersConsumer = "workers"
	// LearnerConsumer is the learner's durable consumer on the trajectory
	// log; its priority group LearnerGroup pins the one active learner.
	LearnerConsumer = "learner"
	LearnerGroup    = "learner"
	RunsBucket      = "a2farm-runs"
	WorkersBucket   = "a2farm-workers"
	PayloadStore    = "a2farm-payloads"
	// IndexStore holds built snapshot indexes that workers share;
	// IndexClaims holds who is building which, as expiring leases.
	IndexStore  = "a2farm-indexes"
	IndexClaims = "a2farm-index-claims"

	jobsPrefix = "a2farm.jobs."
	trajPrefix = "a2farm.trajectories."
	deadPrefix = "a2farm.dead."

	// maxDeliveriesSubject is where the server announces jobs that ran out
	// of deliveries; the dead-letter stream captures it so no advisory is
	// lost while no coordinator listens.
	maxDeliveriesSubject = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + JobsStream + "." + WorkersConsumer

	// payloadHeader marks a trajectory message whose Arrow payload sits in
	// the object store under the named key.
	payloadHeader = "A2farm-Payload"
)

// Config holds the topology's settings; start from DefaultConfig.
type Config struct {
	// Replicas of every stream and bucket: 1 embedded, 3 on a cluster.
	Replicas    int
	DedupWindow time.Duration
	// AckWait is how long a job may go without InProgress before
	// redelivery; MaxDeliver the attempts before a job is dead.
	AckWait    time.Duration
	MaxDeliver int
	// MaxInFlight bounds the jobs delivered and not yet acknowledged
	// across the whole farm: it must exceed the sum of the workers'
	// concurrency, or slots idle while jobs wait (the server's default
	// of 1,000 did exactly that to a 2,048-episode farm).
	MaxInFlight int
	// MaxMsgSize bounds a trajectory message; larger payloads go through
	// the object store.
	MaxMsgSize int
	// HeartbeatTTL expires workers that stop reporting.
	HeartbeatTTL time.Duration
	// TrajMaxAge bounds the trajectory log (0: kept forever).
	TrajMaxAge time.Duration
	// IndexMaxAge bounds how long a shared index is kept after it is
	// stored (0: kept forever); IndexMaxBytes bounds the store (0: no
	// bound; a full store refuses new indexes, and workers then keep
	// theirs to themselves).
	IndexMaxAge   time.Duration
	IndexMaxBytes int64
}

// DefaultConfig is the farm's default topology (docs/ARCHITECTURE.md, Defaults).
func DefaultConfig() Config {
	return Config{Replicas: 1, DedupWindow: time.Hour, AckWait: 60 * time.Second, MaxDeliver: 3, MaxInFlight: 100_000,
		MaxMsgSize: 8 << 20, HeartbeatTTL: 30 * time.Second, IndexMaxAge: 7 * 24 * time.Hour}
}

// Validate reports bad settings before anything touches the server.
func (c Config) Validate() error {
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("replicas must be 1 to 5, got %d", c.Replicas)
	case c.DedupWindow < time.Minute:
		return fmt.Errorf("dedup window must be at least a minute, got %s", c.DedupWindow)
	case c.AckWait < time.Second || c.MaxDeliver < 1:
		return fmt.Errorf("ack wait must be >= 1s and max deliver >= 1, got %s and %d", c.AckWait, c.MaxDeliver)
	case c.MaxInFlight < 1:
		return fmt.Errorf("max in flight must be >= 1, got %d", c.MaxInFlight)
	case c.MaxMsgSize < 1024:
		return fmt.Errorf("max message size must be >= 1 KiB, got %d", c.MaxMsgSize)
	case c.HeartbeatTTL < time.Second:
		return fmt.Errorf("heartbeat TTL must be >= 1s, got %s", c.HeartbeatTTL)
	}
	return nil
}

// Bus is an opened topology.
type Bus struct {
	js       jetstream.JetStream
	cfg      Config
	Jobs     jetstream.Stream
	Traj     jetstream.Stream
	Dead     jetstream.Stream
	Consumer jetstream.Consumer
	Runs     jetstream.KeyValue
	Workers  jetstream.KeyValue
	Payloads jetstream.ObjectStore
	// Indexes and IndexBuilds are nil on a farm created before they
	// existed: workers then build every index themselves.
	Indexes     jetstream.ObjectStore
	IndexBuilds jetstream.KeyValue
	// Inboxes holds the jobs handed to one named worker; nil on a farm
	// created before it existed (hand-offs then use the shared queue).
	Inboxes jetstream.Stream
	codec   payloadCodec
}

// Open creates (or updates) every part of the topology; it is safe to
// call from every process at start-up.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{js: js, cfg: cfg, codec: newPayloadCodec()}
	var err error
	if b.Jobs, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: JobsStream, Subjects: []string{jobsPrefix + ">"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Duplicates: cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("jobs stream: %w", err)
	}
	if b.Traj, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: TrajStream, Subjects: []string{trajPrefix + ">"}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Duplicates: cfg.DedupWindow,
		MaxMsgSize: int32(cfg.MaxMsgSize + 64<<10), MaxAge: cfg.TrajMaxAge,
	}); err != nil {
		return nil, fmt.Errorf("trajectory stream: %w", err)
	}
	if b.Dead, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: DeadStream, Subjects: []string{deadPrefix + ">", maxDeliveriesSubject}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Duplicates: cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	if b.Inboxes, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: InboxStream, Subjects: []string{inboxPrefix + ">"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Duplicates: cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("inbox stream: %w", err)
	}
	if b.Consumer, err = b.Jobs.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: WorkersConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: cfg.AckWait,
		MaxDeliver: cfg.MaxDeliver, MaxAckPending: cfg.MaxInFlight, Replicas: cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("workers consumer: %w", err)
	}
	if b.Runs, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: RunsBucket, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, History: 1,
	}); err != nil {
		return nil, fmt.Errorf("runs bucket: %w", err)
	}
	if b.Workers, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		// File storage: the bucket (not the heartbeats, which expire)
		// must outlive a server restart.
		Bucket: WorkersBucket, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, TTL: cfg.HeartbeatTTL, History: 1,
	}); err != nil {
		return nil, fmt.Errorf("workers bucket: %w", err)
	}
	if b.Payloads, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		// Large payloads live exactly as long as the log messages that
		// reference them.
		Bucket: PayloadStore, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, TTL: cfg.TrajMaxAge,
	}); err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	if b.Indexes, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: IndexStore, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, TTL: cfg.IndexMaxAge,
		MaxBytes: cfg.IndexMaxBytes,
	}); err != nil {
		return nil, fmt.Errorf("index store: %w", err)
	}
	if b.IndexBuilds, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		// Memory is enough: a claim outlives neither its builder nor, by
		// much, its lease.
		Bucket: IndexClaims, Storage: jetstream.MemoryStorage, Replicas: cfg.Replicas, TTL: IndexClaimTTL, History: 1,
	}); err != nil {
		return nil, fmt.Errorf("index claims: %w", err)
	}
	return b, nil
}

// Attach opens a topology that already exists without changing it, for
// commands that only read or requeue (status, jobs retry): they must not
// reset a farm's ack wait or delivery limit to their own defaults. The
// configuration is read back from the server.
func Attach(ctx context.Context, js jetstream.JetStream) (*Bus, error) {
	b := &Bus{js: js, codec: newPayloadCodec()}
	var err error
	if b.Jobs, err = js.Stream(ctx, JobsStream); err != nil {
		return nil, fmt.Errorf("no a2farm topology on this server: create it with `a2farm farm init` (an embedded `a2farm nats` creates it itself): %w", err)
	}
	if b.Traj, err = js.Stream(ctx, TrajStream); err != nil {
		return nil, fmt.Errorf("trajectory stream: %w", err)
	}
	if b.Dead, err = js.Stream(ctx, DeadStream); err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	if b.Consumer, err = b.Jobs.Consumer(ctx, WorkersConsumer); err != nil {
		return nil, fmt.Errorf("workers consumer: %w", err)
	}
	if inboxes, err := js.Stream(ctx, InboxStream); err == nil {
		b.Inboxes = inboxes
	}
	if b.Runs, err = js.KeyValue(ctx, RunsBucket); err != nil {
		return nil, fmt.Errorf("runs bucket: %w", err)
	}
	if b.Workers, err = js.KeyValue(ctx, WorkersBucket); err != nil {
		return nil, fmt.Errorf("workers bucket: %w", err)
	}
	if b.Payloads, err = js.ObjectStore(ctx, PayloadStore); err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	// A farm made by an older a2farm has no index store: its workers
	// build every index themselves until `farm init` adds it.
	var indexCfg jetstream.ObjectStoreConfig
	if store, err := js.ObjectStore(ctx, IndexStore); err == nil {
		if claims, err := js.KeyValue(ctx, IndexClaims); err == nil {
			b.Indexes, b.IndexBuilds = store, claims
			if st, err := store.Status(ctx); err == nil {
				indexCfg.TTL = st.TTL()
				if info, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo }); ok {
					indexCfg.MaxBytes = info.StreamInfo().Config.MaxBytes
				}
			}
		}
	}
	cc := b.Consumer.CachedInfo().Config
	sc := b.Traj.CachedInfo().Config
	b.cfg = Config{Replicas: sc.Replicas, AckWait: cc.AckWait, MaxDeliver: cc.MaxDeliver, MaxInFlight: cc.MaxAckPending,
		DedupWindow: sc.Duplicates,
		MaxMsgSize:  int(sc.MaxMsgSize) - 64<<10, TrajMaxAge: sc.MaxAge, IndexMaxAge: indexCfg.TTL,
		IndexMaxBytes: max(0, indexCfg.MaxBytes)}
	if st, err := b.Workers.Status(ctx); err == nil {
		b.cfg.HeartbeatTTL = st.TTL()
	}
	return b, nil
}

// Config is the topology's configuration as opened or read back.
func (b *Bus) Config() Config { return b.cfg }

// Difference is one setting in which two topology configurations differ,
// named by its command-line flag.
type Difference struct{ Flag, Have, Want string }

// Differences lists the settings in which want differs from have.
func Differences(have, want Config) []Difference {
	var out []Difference
	add := func(flag string, a, b any) {
		if a != b {
			out = append(out, Difference{Flag: flag, Have: fmt.Sprint(a), Want: fmt.Sprint(b)})
		}
	}
	add("replicas", have.Replicas, want.Replicas)
	add("ack-wait", have.AckWait, want.AckWait)
	add("max-deliver", have.MaxDeliver, want.MaxDeliver)
	add("max-in-flight", have.MaxInFlight, want.MaxInFlight)
	add("dedup-window", have.DedupWindow, want.DedupWindow)
	add("max-msg-size", have.MaxMsgSize, want.MaxMsgSize)
	add("heartbeat-ttl", have.HeartbeatTTL, want.HeartbeatTTL)
	add("log-max-age", have.TrajMaxAge, want.TrajMaxAge)
	add("index-max-age", have.IndexMaxAge, want.IndexMaxAge)
	add("index-max-bytes", have.IndexMaxBytes, want.IndexMaxBytes)
	return out
}

// runKey is the runs-bucket key of a run iteration.
func runKey(runID string, iteration int64) string {
	return fmt.Sprintf("%s.%d", subjectToken(runID), iteration)
}

// PutRun stores a run manifest.
func (b *Bus) PutRun(ctx context.Context, m *schema.RunManifest) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := b.Runs.Put(ctx, runKey(m.RunID, m.Iteration), data); err != nil {
		return fmt.Errorf("store run manifest: %w", err)
	}
	return nil
}

// GetRun reads a run manifest.
func (b *Bus) GetRun(ctx context.Context, runID string, iteration int64) (*schema.RunManifest, error) {
	e, err := b.Runs.Get(ctx, runKey(runID, iteration))
	if err != nil {
		return nil, fmt.Errorf("run %s iteration %d: %w", runID, iteration, err)
	}
	var m schema.RunManifest
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return nil, fmt.Errorf("run %s iteration %d: %w", runID, iteration, err)
	}
	return &m, nil
}

// Heartbeat is what a worker reports in the workers bucket.
type Heartbeat struct {
	ID       string `json:"id"`
	Host     string `json:"host"`
	Active   int    `json:"active"`
	Capacity int    `json:"capacity"`
	// Done counts the episodes the worker played to a trajectory;
	// HandedOff the jobs it passed to another worker instead.
	Done      int64  `json:"done"`
	HandedOff int64  `json:"handed_off,omitempty"`
	Version   string `json:"version"`
	// Policies are what the worker can play: policy kinds, and
	// "openai:MODEL" or "openai:*" for the models its endpoints serve.
	Policies []string `json:"policies,omitempty"`
	// Lacks are snapshots ("owner/name@commit") the worker was asked for
	// recently and does not have.
	Lacks []string `json:"lacks,omitempty"`
	// Indexes are the snapshot indexes the worker holds open, IndexBytes
	// their estimated memory and IndexBudget its bound (--index-memory).
	Indexes     int   `json:"indexes,omitempty"`
	IndexBytes  int64 `json:"index_bytes,omitempty"`
	IndexBudget int64 `json:"index_budget,omitempty"`
	// Replicas are the policy servers the worker sends episodes to.
	Replicas []ReplicaLoad `json:"replicas,omitempty"`
	Updated  time.Time     `json:"updated"`
}

// ReplicaLoad is what a worker reports of one policy server.
type ReplicaLoad struct {
	// Model is the model the replica serves ("*": any).
	Model string `json:"model"`
	URL   string `json:"url"`
	// InFlight are the worker's episodes bound to it now; Requests and
	// Errors count chat requests and those that failed after the retries.
	InFlight int   `json:"in_flight"`
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	Healthy  bool  `json:"healthy"`
}

// HeartbeatTTL is how long a worker's heartbeat lives.
func (b *Bus) HeartbeatTTL() time.Duration { return b.cfg.HeartbeatTTL }

// Token makes a run id safe inside a subject or bucket key.
func Token(s string) string { return subjectToken(s) }

func trajSubject(runID string, iteration int64) string {
	return fmt.Sprintf("%s%s.%d", trajPrefix, subjectToken(runID), iteration)
}

// subjectToken makes a run id safe inside a subject.
func subjectToken(s string) string {
	return strings.NewReplacer(".", "_", " ", "_", "*", "_", ">", "_").Replace(s)
}

// PublishJob queues a job; its id is the message id, so publishing the
// same job twice within the dedup window stores it once.
func (b *Bus) PublishJob(ctx context.Context, job schema.Job) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if err := b.queueJob(ctx, job, job.JobID); err != nil {
		return fmt.Errorf("publish job %s: %w", job.JobID, err)
	}
	return nil
}

// PublishedHeader carries the time a job was queued (Unix nanoseconds, the
// publisher's clock), for measuring how long jobs wait for a worker.
const PublishedHeader = "A2farm-Published"

// queueJob publishes job on its run's subject under msgID.
func (b *Bus) queueJob(ctx context.Context, job schema.Job, msgID string) error {
	msg, err := jobMessage(jobsPrefix+subjectToken(job.RunID), job)
	if err != nil {
		return err
	}
	_, err = b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	return err
}

// PublishJobAttempt re-queues a job for another attempt: the message id
// carries the attempt so the dedup window does not swallow it.
func (b *Bus) PublishJobAttempt(ctx context.Context, job schema.Job) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if err := b.queueJob(ctx, job, fmt.Sprintf("%s#%d", job.JobID, job.Attempt)); err != nil {
		return fmt.Errorf("publish job %s: %w", job.JobID, err)
	}
	return nil
}

// HandOff queues a job again on the shared queue for another worker, as
// a fresh message (its own id, a delivery count from zero), so that
// passing it on spends none of its deliveries; HandOffTo names the
// worker, which a farm with inboxes does. The caller acknowledges the
// original only after this returns.
func (b *Bus) HandOff(ctx context.Context, job schema.Job) error {
	job.Handoffs++
	if err := b.queueJob(ctx, job, handOffID(job)); err != nil {
		return fmt.Errorf("hand off job %s: %w", job.JobID, err)
	}
	return nil
}

// Requeue queues a job again as a fresh message, like HandOff, for a job
// that waits out an outage of its model: its deliveries are not spent
// while no server can play it. The caller acknowledges the original only
// after this returns.
func (b *Bus) Requeue(ctx context.Context, job schema.Job) error {
	job.Outages++
	if err := b.queueJob(ctx, job, fmt.Sprintf("%s#%d/outage-%d", job.JobID, max(job.Attempt, 1), job.Outages)); err != nil {
		return fmt.Errorf("requeue job %s: %w", job.JobID, err)
	}
	return nil
}

// checkJob refuses a job that could never be accounted for.
func checkJob(job schema.Job) error {
	if job.JobID == "" || job.RunID == "" {
		return fmt.Errorf("job %q of run %q: a job needs a job id and a run id", job.JobID, job.RunID)
	}
	return nil
}

// DeadLetter records a job that exhausted its deliveries.
type DeadLetter struct {
	Job        schema.Job `json:"job"`
	Deliveries int        `json:"deliveries"`
	// Reason says why the job cannot succeed, when the worker that gave
	// it up knew (no endpoint serves its model, say).
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// seq is the record's place in the dead-letter stream, for removal.
	seq uint64
}

// HandleDeadJobs turns max-deliveries advisories into dead letters until
// ctx ends: for each, the job is read from the queue, an infra_error
// trajectory is published for it (so its group can close), a dead-letter
// record is stored for `jobs retry`, and the job leaves the queue. Several
// handlers may run; the durable consumer hands each advisory to one.
//
// A job that could never be accounted for (no job or run id: not published
// by a2farm) is dropped from the queue and reported through onDropped,
// instead of its advisory coming back forever.
func (b *Bus) HandleDeadJobs(ctx context.Context, onDead func(DeadLetter), onDropped func(seq uint64, why string)) error {
	cons, err := b.Dead.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "dead-letters", FilterSubject: maxDeliveriesSubject, AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return fmt.Errorf("dead-letter consumer: %w", err)
	}
	for ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		var adv struct {
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries int    `json:"deliveries"`
		}
		if json.Unmarshal(msg.Data(), &adv) != nil || adv.StreamSeq == 0 {
			_ = msg.Term()
			continue
		}
		raw, err := b.Jobs.GetMsg(ctx, adv.StreamSeq)
		if err != nil {
			_ = msg.Ack() // the job is gone already (handled, or retried and acked)
			continue
		}
		var job schema.Job
		err = json.Unmarshal(raw.Data, &job)
		if err == nil {
			err = checkJob(job)
		}
		if err != nil {
			_ = b.Jobs.DeleteMsg(ctx, adv.StreamSeq)
			_ = msg.Ack()
			if onDropped != nil {
				onDropped(adv.StreamSeq, err.Error())
			}
			continue
		}
		dl := DeadLetter{Job: job, Deliveries: adv.Deliveries, At: time.Now().UTC()}
		if err := b.deadLetter(ctx, dl); err != nil {
			_ = msg.Nak()
			continue
		}
		_ = b.Jobs.DeleteMsg(ctx, adv.StreamSeq)
		_ = msg.Ack()
		if onDead != nil {
			onDead(dl)
		}
	}
	return nil
}

// GiveUp dead-letters a job a worker knows cannot succeed, with the
// reason: an infra_error trajectory carrying the reason is published (so
// its group can close and the learner records why) and a dead letter is
// stored for `jobs retry`. The caller then acknowledges the job.
func (b *Bus) GiveUp(ctx context.Context, job schema.Job, deliveries int, reason string) error {
	return b.deadLetter(ctx, DeadLetter{Job: job, Deliveries: deliveries, Reason: reason, At: time.Now().UTC()})
}

func (b *Bus) deadLetter(ctx context.Context, dl DeadLetter) error {
	job := dl.Job
	why := fmt.Sprintf("job failed %d deliveries", dl.Deliveries)
	if dl.Reason != "" {
		why = dl.Reason
	}
	// The dead letter is stored first: whoever sees the job's trajectory
	// can count on its dead letter (both publishes deduplicate, so a
	// retry after a failure between them stores neither twice).
	data, _ := json.Marshal(dl)
	if _, err := b.js.Publish(ctx, deadPrefix+subjectToken(job.RunID), data,
		jetstream.WithMsgID(fmt.Sprintf("dead/%s#%d", job.JobID, job.Attempt))); err != nil {
		return fmt.Errorf("store dead letter of %s: %w", job.JobID, err)
	}
	return b.PublishTrajectory(ctx, job.InfraError(why, dl.At))
}

// AckWait is how long a delivered job may go without an acknowledgement
// or a progress signal before it is redelivered.
func (b *Bus) AckWait() time.Duration { return b.cfg.AckWait }

// MaxPayload is the largest message the server accepts (0: unknown).
func (b *Bus) MaxPayload() int64 {
	if nc := b.js.Conn(); nc != nil {
		return nc.MaxPayload()
	}
	return 0
}

// MaxDeliver is how many times a job is delivered before it is dead.
func (b *Bus) MaxDeliver() int { return b.cfg.MaxDeliver }

// StartDeadJobHandler runs HandleDeadJobs in the background, logging
// each dead letter, until the returned stop is called (it waits for the
// handler to end) or ctx ends.
func (b *Bus) StartDeadJobHandler(ctx context.Context, log zerolog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := b.HandleDeadJobs(ctx, func(dl DeadLetter) {
			log.Warn().Str("job", dl.Job.JobID).Int("deliveries", dl.Deliveries).
				Msg("job dead-lettered; requeue it with `a2farm jobs retry`")
		}, func(seq uint64, why string) {
			log.Error().Uint64("seq", seq).Str("reason", why).Msg("dropped a job that ran out of deliveries and can never be accounted for")
		})
		if err != nil {
			log.Error().Err(err).Msg("dead-letter handling stopped")
		}
	}()
	return func() { cancel(); <-done }
}

// DeadCount is the number of dead letters of a run.
func (b *Bus) DeadCount(ctx context.Context, runID string) (int, error) {
	return countSubject(ctx, b.Dead, deadPrefix+subjectToken(runID))
}

// TrajectoryCount is the number of jobs of a run iteration that have a
// trajectory (infra_error ones included): message ids deduplicate
// redeliveries, and retried attempts are published beside, not in, the
// counted subject.
func (b *Bus) TrajectoryCount(ctx context.Context, runID string, iteration int64) (int, error) {
	return countSubject(ctx, b.Traj, trajSubject(runID, iteration))
}

func countSubject(ctx context.Context, s jetstream.Stream, subject string) (int, error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}

// DeadLetters lists the dead letters of a run.
func (b *Bus) DeadLetters(ctx context.Context, runID string) ([]DeadLetter, error) {
	cons, err := b.js.OrderedConsumer(ctx, DeadStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{deadPrefix + subjectToken(runID)}})
	if err != nil {
		return nil, err
	}
	n, err := b.DeadCount(ctx, runID)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for range n {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return nil, err
		}
		var dl DeadLetter
		if json.Unmarshal(msg.Data(), &dl) == nil {
			if md, err := msg.Metadata(); err == nil {
				dl.seq = md.Sequence.Stream
			}
			out = append(out, dl)
		}
	}
	return out, nil
}

// RetryDead queues every dead job of a run again as its next attempt and
// removes its dead letter; it returns the jobs requeued. A letter is
// removed only after its job is queued, so a crash in between leaves the
// letter to retry again (the attempt's message id dedups the job).
func (b *Bus) RetryDead(ctx context.Context, runID string) ([]schema.Job, error) {
	letters, err := b.DeadLetters(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	var requeued []schema.Job
	for _, dl := range letters {
		job := dl.Job
		job.Attempt = max(job.Attempt, 1) + 1
		if err := b.PublishJobAttempt(ctx, job); err != nil {
			return requeued, err
		}
		if err := b.Dead.DeleteMsg(ctx, dl.seq); err != nil {
			return requeued, fmt.Errorf("remove dead letter of %s: %w", job.JobID, err)
		}
		requeued = append(requeued, job)
	}
	return requeued, nil
}

// DecodeJob reads a job message.
func DecodeJob(msg jetstream.Msg) (schema.Job, error) {
	var job schema.Job
	if err := json.Unmarshal(msg.Data(), &job); err != nil {
		return job, fmt.Errorf("job message: %w", err)
	}
	if job.JobID == "" {
		return job, errors.New("job message without a job id")
	}
	return job, nil
}

// PublishTrajectory stores a trajectory in the log as an Arrow IPC (zstd)
// payload, deduplicated by job id; payloads above MaxMsgSize go through
// the object store and the message carries the reference.
func (b *Bus) PublishTrajectory(ctx context.Context, tr schema.Trajectory) error {
	payload, err := b.codec.encode(tr)
	if err != nil {
		return err
	}
	// Later attempts of a job go to a sub-subject: the run's own subject
	// then holds exactly one trajectory per job that has been answered,
	// which is what TrajectoryCount reports.
	subject := trajSubject(tr.RunID, tr.Iteration)
	if tr.Attempt > 1 {
		subject += ".retry"
	}
	msg := &nats.Msg{Subject: subject, Header: nats.Header{encodingHeader: {encodingZstd}}}
	// Attempts after the first get their own id: a retried job's
	// trajectory must not be swallowed as a duplicate of its failure.
	id := tr.JobID
	if tr.Attempt > 1 {
		id = fmt.Sprintf("%s#%d", tr.JobID, tr.Attempt)
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if len(payload) > b.cfg.MaxMsgSize {
		key := "traj/" + tr.JobID
		if _, err := b.Payloads.PutBytes(ctx, key, payload); err != nil {
			return fmt.Errorf("store payload of %s: %w", tr.JobID, err)
		}
		msg.Header.Set(payloadHeader, key)
	} else {
		msg.Data = payload
	}
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish trajectory %s: %w", tr.JobID, err)
	}
	return nil
}

// DecodeTrajectory reads a trajectory message, fetching an offloaded
// payload from the object store.
func (b *Bus) DecodeTrajectory(ctx context.Context, msg jetstream.Msg) (schema.Trajectory, error) {
	return b.decodeTrajectory(ctx, msg.Data(), msg.Headers())
}

// ErrRecordGone marks a trajectory no longer in the log (expired, or
// deleted), which a branch of it can never replay.
var ErrRecordGone = errors.New("trajectory no longer in the log")

// TrajectoryAt reads the trajectory stored at sequence seq of the log:
// the record a branch replays its parent from.
func (b *Bus) TrajectoryAt(ctx context.Context, seq int64) (schema.Trajectory, error) {
	raw, err := b.Traj.GetMsg(ctx, uint64(seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schema.Trajectory{}, fmt.Errorf("log message %d: %w", seq, ErrRecordGone)
	}
	if err != nil {
		return schema.Trajectory{}, fmt.Errorf("read log message %d: %w", seq, err)
	}
	return b.decodeTrajectory(ctx, raw.Data, raw.Header)
}

func (b *Bus) decodeTrajectory(ctx context.Context, data []byte, header nats.Header) (schema.Trajectory, error) {
	if key := header.Get(payloadHeader); key != "" {
		var err error
		if data, err = b.Payloads.GetBytes(ctx, key); err != nil {
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				return schema.Trajectory{}, fmt.Errorf("payload %s is missing: %w", key, err)
			}
			return schema.Trajectory{}, fmt.Errorf("fetch payload %s: %w: %w", key, ErrPayloadUnavailable, err)
		}
	}
	out, err := b.codec.decode(data, header.Get(encodingHeader))
	if err != nil {
		return schema.Trajectory{}, err
	}
	if len(out) != 1 {
		return schema.Trajectory{}, fmt.Errorf("trajectory message holds %d trajectories, want 1", len(out))
	}
	return out[0], nil
}

// ErrPayloadUnavailable marks a trajectory whose payload could not be
// fetched from the object store for now (not a bad message).
var ErrPayloadUnavailable = errors.New("trajectory payload unavailable")

// QueueState is the jobs queue as the server sees it.
type QueueState struct {
	Pending  uint64 // not yet delivered
	InFlight uint64 // delivered and not acknowledged
	// Redelivered counts jobs delivered more than once and not yet done.
	Redelivered uint64
	// Handed counts jobs handed to one named worker, waiting in its inbox
	// or being played there.
	Handed uint64
}

// Queue reads the jobs queue from the workers' consumer and the inboxes.
func (b *Bus) Queue(ctx context.Context) (QueueState, error) {
	info, err := b.Consumer.Info(ctx)
	if err != nil {
		return QueueState{}, err
	}
	q := QueueState{Pending: info.NumPending, InFlight: uint64(info.NumAckPending), Redelivered: uint64(info.NumRedelivered)}
	if b.Inboxes != nil {
		si, err := b.Inboxes.Info(ctx)
		if err != nil {
			return QueueState{}, fmt.Errorf("inboxes: %w", err)
		}
		q.Handed = si.State.Msgs
	}
	return q, nil
}

// QueueDepth is the work left for workers: messages not yet delivered
// (jobs handed to a named worker included) plus those delivered and not
// acknowledged (what KEDA's JetStream scaler reads).
func (b *Bus) QueueDepth(ctx context.Context) (pending, inFlight uint64, err error) {
	q, err := b.Queue(ctx)
	return q.Pending + q.Handed, q.InFlight, err
}

// LearnerState is the learner's side of the trajectory log.
type LearnerState struct {
	Started bool   `json:"started"` // a learner has created its consumer
	Backlog uint64 `json:"backlog"` // trajectories not yet delivered to it
	Unacked int    `json:"unacked"` // delivered, not yet archived
	// Active is set while a learner holds the log (pinned), since Since.
	Active bool      `json:"active"`
	Since  time.Time `json:"since,omitzero"`
}

// Learner reads the state of the learner's consumer.
func (b *Bus) Learner(ctx context.Context) (LearnerState, error) {
	c, err := b.Traj.Consumer(ctx, LearnerConsumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return LearnerState{}, nil
	}
	if err != nil {
		return LearnerState{}, err
	}
	info := c.CachedInfo() // just fetched by Consumer: one round trip, not two
	st := LearnerState{Started: true, Backlog: info.NumPending, Unacked: info.NumAckPending}
	for _, g := range info.PriorityGroups {
		if g.Group == LearnerGroup && g.PinnedClientID != "" {
			st.Active, st.Since = true, g.PinnedTS
		}
	}
	return st, nil
}

// LearnerBacklog is what the learner has still to archive: trajectories
// not yet delivered to it, and delivered but not yet acknowledged.
func (b *Bus) LearnerBacklog(ctx context.Context) (waiting, archiving uint64, err error) {
	st, err := b.Learner(ctx)
	return st.Backlog, uint64(st.Unacked), err
}

// LiveWorkers lists the heartbeats that have not expired, by worker id.
func (b *Bus) LiveWorkers(ctx context.Context) ([]Heartbeat, error) {
	keys, err := b.Workers.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Heartbeat
	for k := range keys.Keys() {
		e, err := b.Workers.Get(ctx, k)
		if err != nil {
			continue // expired between listing and reading
		}
		var hb Heartbeat
		if json.Unmarshal(e.Value(), &hb) == nil {
			out = append(out, hb)
		}
	}
	slices.SortFunc(out, func(a, b Heartbeat) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ListRuns lists the stored run manifests, oldest first.
func (b *Bus) ListRuns(ctx context.Context) ([]schema.RunManifest, error) {
	keys, err := b.Runs.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []schema.RunManifest
	for k := range keys.Keys() {
		if strings.HasPrefix(k, "_") { // the learner's report, not a run
			continue
		}
		e, err := b.Runs.Get(ctx, k)
		if err != nil {
			continue
		}
		var m schema.RunManifest
		if json.Unmarshal(e.Value(), &m) == nil {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b schema.RunManifest) int { return a.Created.Compare(b.Created) })
	return out, nil
}

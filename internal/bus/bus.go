// Package bus is the farm's JetStream topology: the jobs work queue with
// its one shared durable consumer, the trajectory log, dead letters, the
// runs and workers key-value buckets and the payload object store. It is
// the only package that knows subject, stream and bucket names.
package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/schema"
)

// Names of the topology.
const (
	JobsStream      = "A2FARM_JOBS"
	TrajStream      = "A2FARM_TRAJECTORIES"
	DeadStream      = "A2FARM_DEAD"
	WorkersConsumer = "workers"
	RunsBucket      = "a2farm-runs"
	WorkersBucket   = "a2farm-workers"
	PayloadStore    = "a2farm-payloads"

	jobsPrefix = "a2farm.jobs."
	trajPrefix = "a2farm.trajectories."
	deadPrefix = "a2farm.dead."

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
	// MaxMsgSize bounds a trajectory message; larger payloads go through
	// the object store.
	MaxMsgSize int
	// HeartbeatTTL expires workers that stop reporting.
	HeartbeatTTL time.Duration
	// TrajMaxAge bounds the trajectory log (0: kept forever).
	TrajMaxAge time.Duration
}

// DefaultConfig is DESIGN.md §4.
func DefaultConfig() Config {
	return Config{Replicas: 1, DedupWindow: time.Hour, AckWait: 60 * time.Second, MaxDeliver: 3,
		MaxMsgSize: 8 << 20, HeartbeatTTL: 30 * time.Second}
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
}

// Open creates (or updates) every part of the topology; it is safe to
// call from every process at start-up.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{js: js, cfg: cfg}
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
		Name: DeadStream, Subjects: []string{deadPrefix + ">"}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Duplicates: cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	if b.Consumer, err = b.Jobs.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: WorkersConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: cfg.AckWait,
		MaxDeliver: cfg.MaxDeliver, Replicas: cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("workers consumer: %w", err)
	}
	if b.Runs, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: RunsBucket, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, History: 1,
	}); err != nil {
		return nil, fmt.Errorf("runs bucket: %w", err)
	}
	if b.Workers, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: WorkersBucket, Storage: jetstream.MemoryStorage, Replicas: cfg.Replicas, TTL: cfg.HeartbeatTTL, History: 1,
	}); err != nil {
		return nil, fmt.Errorf("workers bucket: %w", err)
	}
	if b.Payloads, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: PayloadStore, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	return b, nil
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

// HeartbeatTTL is how long a worker's heartbeat lives.
func (b *Bus) HeartbeatTTL() time.Duration { return b.cfg.HeartbeatTTL }

// Token makes a run id safe inside a subject or bucket key.
func Token(s string) string { return subjectToken(s) }

// SubjectsFilter asks stream info for the per-subject counts of the
// trajectories of one run iteration.
func SubjectsFilter(runID string, iteration int64) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(trajSubject(runID, iteration))
}

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
	data, err := json.Marshal(job)
	if err != nil {
		return err
	}
	_, err = b.js.Publish(ctx, jobsPrefix+subjectToken(job.RunID), data, jetstream.WithMsgID(job.JobID))
	if err != nil {
		return fmt.Errorf("publish job %s: %w", job.JobID, err)
	}
	return nil
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
	rec := schema.EncodeTrajectories(nil, tr)
	defer rec.Release()
	var buf bytes.Buffer
	if err := schema.WriteIPC(&buf, schema.TrajectorySchema(), rec); err != nil {
		return err
	}
	msg := &nats.Msg{Subject: trajSubject(tr.RunID, tr.Iteration), Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, tr.JobID)
	if buf.Len() > b.cfg.MaxMsgSize {
		key := "traj/" + tr.JobID
		if _, err := b.Payloads.PutBytes(ctx, key, buf.Bytes()); err != nil {
			return fmt.Errorf("store payload of %s: %w", tr.JobID, err)
		}
		msg.Header.Set(payloadHeader, key)
	} else {
		msg.Data = buf.Bytes()
	}
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish trajectory %s: %w", tr.JobID, err)
	}
	return nil
}

// DecodeTrajectory reads a trajectory message, fetching an offloaded
// payload from the object store.
func (b *Bus) DecodeTrajectory(ctx context.Context, msg jetstream.Msg) (schema.Trajectory, error) {
	data := msg.Data()
	if key := msg.Headers().Get(payloadHeader); key != "" {
		var err error
		if data, err = b.Payloads.GetBytes(ctx, key); err != nil {
			return schema.Trajectory{}, fmt.Errorf("fetch payload %s: %w", key, err)
		}
	}
	var out []schema.Trajectory
	err := schema.ReadIPC(bytes.NewReader(data), func(rec arrow.RecordBatch) error {
		trs, err := schema.DecodeTrajectories(rec)
		out = append(out, trs...)
		return err
	})
	if err != nil {
		return schema.Trajectory{}, err
	}
	if len(out) != 1 {
		return schema.Trajectory{}, fmt.Errorf("trajectory message holds %d trajectories, want 1", len(out))
	}
	return out[0], nil
}

// QueueDepth is the work left for workers: messages not yet delivered
// plus those delivered and not acknowledged (what KEDA's JetStream scaler
// reads).
func (b *Bus) QueueDepth(ctx context.Context) (pending, inFlight uint64, err error) {
	info, err := b.Consumer.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return info.NumPending, uint64(info.NumAckPending), nil
}

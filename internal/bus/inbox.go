package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/schema"
)

// Inboxes: a job that the worker which pulled it cannot play (it lacks the
// snapshot, or does not serve the policy) is handed to one named worker
// that can, through that worker's inbox. A blind re-queue on the shared
// consumer goes to whoever pulls first — while the workers that can play
// it are busy, that is the idle one that just passed it on, again and
// again until the job's deliveries run out.
const (
	InboxStream = "A2FARM_INBOX"
	inboxPrefix = "a2farm.inbox."

	// DeclinedHeader lists the workers that passed a job on (one value
	// each): a hand-off never goes back to one of them.
	DeclinedHeader = "A2farm-Declined"

	// inboxIdle is how long an inbox consumer may go unread before the
	// server removes it (its jobs stay in the stream, for RescueInboxes);
	// a worker reads its inbox whenever it has a free slot.
	inboxIdle = 24 * time.Hour
)

// inboxToken names a worker's inbox in a subject and a consumer name,
// which allow fewer characters than a worker id; an id that had to be
// changed gets a hash of itself so that two ids never share an inbox.
func inboxToken(workerID string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, workerID)
	if clean == workerID && clean != "" {
		return clean
	}
	h := fnv.New32a()
	h.Write([]byte(workerID))
	return fmt.Sprintf("%s-%08x", clean, h.Sum32())
}

func inboxConsumerConfig(token string, ackWait time.Duration, replicas int) jetstream.ConsumerConfig {
	// Unlimited deliveries: a job in an inbox that keeps failing is moved
	// back to the shared queue by its worker (MoveToQueue), where the
	// delivery limit and dead letters apply; a limit here would strand it.
	return jetstream.ConsumerConfig{Durable: "inbox-" + token, FilterSubject: inboxPrefix + token,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1, InactiveThreshold: inboxIdle,
		Replicas: replicas}
}

// ErrNoInboxes marks a farm created before inboxes existed: hand-offs
// then go back to the shared queue (`farm init` adds the inboxes).
var ErrNoInboxes = errors.New("the farm has no worker inboxes (run `a2farm farm init`)")

// Inbox opens the consumer of a worker's inbox.
func (b *Bus) Inbox(ctx context.Context, workerID string) (jetstream.Consumer, error) {
	if b.Inboxes == nil {
		return nil, ErrNoInboxes
	}
	c, err := b.Inboxes.CreateOrUpdateConsumer(ctx, inboxConsumerConfig(inboxToken(workerID), b.cfg.AckWait, b.cfg.Replicas))
	if err != nil {
		return nil, fmt.Errorf("inbox of worker %s: %w", workerID, err)
	}
	return c, nil
}

// HandOffTo queues a job in one worker's inbox, as a fresh message like
// HandOff. declined names the workers that passed the job on, this one
// included; they travel with it so that it is never handed back to one.
func (b *Bus) HandOffTo(ctx context.Context, job schema.Job, workerID string, declined []string) error {
	if b.Inboxes == nil {
		return ErrNoInboxes
	}
	job.Handoffs++
	msg, err := jobMessage(inboxPrefix+inboxToken(workerID), job)
	if err != nil {
		return err
	}
	msg.Header[DeclinedHeader] = declined
	if _, err := b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(handOffID(job))); err != nil {
		return fmt.Errorf("hand off job %s to worker %s: %w", job.JobID, workerID, err)
	}
	return nil
}

// handOffID is the message id of a job's Handoffs-th hand-off: the same
// hand-off published twice (a worker that died between publishing and
// acknowledging) is stored once.
func handOffID(job schema.Job) string {
	return fmt.Sprintf("%s#%d/handoff-%d", job.JobID, max(job.Attempt, 1), job.Handoffs)
}

// Declined lists the workers that passed the job of msg on.
func Declined(msg jetstream.Msg) []string {
	if h := msg.Headers(); h != nil {
		return h.Values(DeclinedHeader)
	}
	return nil
}

// FromInbox reports whether msg was read from a worker's inbox rather
// than the shared queue.
func FromInbox(msg jetstream.Msg) bool { return strings.HasPrefix(msg.Subject(), inboxPrefix) }

// MoveToQueue puts a job from an inbox back on the shared queue, keeping
// who declined it; the caller acknowledges the inbox message after this
// returns.
func (b *Bus) MoveToQueue(ctx context.Context, job schema.Job, declined []string) error {
	job.Handoffs++
	msg, err := jobMessage(jobsPrefix+subjectToken(job.RunID), job)
	if err != nil {
		return err
	}
	msg.Header[DeclinedHeader] = declined
	if _, err := b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(handOffID(job))); err != nil {
		return fmt.Errorf("move job %s to the queue: %w", job.JobID, err)
	}
	return nil
}

// InboxDepth counts the jobs waiting in workers' inboxes, by worker inbox
// (the worker id as a subject token).
func (b *Bus) InboxDepth(ctx context.Context) (map[string]uint64, error) {
	if b.Inboxes == nil {
		return nil, nil
	}
	info, err := b.Inboxes.Info(ctx, jetstream.WithSubjectFilter(inboxPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("inboxes: %w", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		out[strings.TrimPrefix(subj, inboxPrefix)] = n
	}
	return out, nil
}

// RescueInboxes moves the jobs in the inboxes of workers that are not
// live (no heartbeat) back to the shared queue, so that a worker that
// died, or stopped for good, with jobs handed to it loses none. It
// returns how many jobs it moved; most calls find every inbox empty and
// cost one request.
func (b *Bus) RescueInboxes(ctx context.Context) (int, error) {
	depth, err := b.InboxDepth(ctx)
	if err != nil || len(depth) == 0 {
		return 0, err
	}
	live, err := b.LiveWorkers(ctx)
	if err != nil {
		return 0, err
	}
	alive := make(map[string]bool, len(live))
	for _, hb := range live {
		alive[inboxToken(hb.ID)] = true
	}
	moved := 0
	var errs []error
	for token, n := range depth {
		if alive[token] || n == 0 {
			continue
		}
		m, err := b.drainInbox(ctx, token, int(n))
		moved += m
		if err != nil {
			errs = append(errs, err)
		}
	}
	return moved, errors.Join(errs...)
}

// drainInbox reads up to n jobs of one inbox and moves each to the queue.
// Several workers may drain one inbox at once: they share its consumer,
// which gives each job to one of them.
func (b *Bus) drainInbox(ctx context.Context, token string, n int) (int, error) {
	c, err := b.Inboxes.CreateOrUpdateConsumer(ctx, inboxConsumerConfig(token, b.cfg.AckWait, b.cfg.Replicas))
	if err != nil {
		return 0, fmt.Errorf("inbox %s: %w", token, err)
	}
	batch, err := c.FetchNoWait(n)
	if err != nil {
		return 0, fmt.Errorf("inbox %s: %w", token, err)
	}
	moved := 0
	for msg := range batch.Messages() {
		job, err := DecodeJob(msg)
		if err != nil {
			_ = msg.Term() // not a job: nothing to move
			continue
		}
		if err := b.MoveToQueue(ctx, job, Declined(msg)); err != nil {
			_ = msg.Nak()
			return moved, err
		}
		if err := msg.DoubleAck(ctx); err != nil {
			return moved, fmt.Errorf("inbox %s: %w", token, err)
		}
		moved++
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return moved, fmt.Errorf("inbox %s: %w", token, err)
	}
	return moved, nil
}

// jobMessage is the message that queues job on subject.
func jobMessage(subject string, job schema.Job) (*nats.Msg, error) {
	data, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: subject, Data: data,
		Header: nats.Header{PublishedHeader: {strconv.FormatInt(time.Now().UnixNano(), 10)}}}, nil
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/schema"
)

// inbox reads the jobs other workers handed to this one by name.
type inbox struct {
	bus      *bus.Bus
	workerID string
	log      zerolog.Logger
	cons     jetstream.Consumer
	// off is set on a farm without inboxes: hand-offs then use the
	// shared queue and there is nothing to read.
	off bool
}

// take returns up to n jobs waiting in the inbox, without waiting for
// more. An inbox the server removed while it went unread is opened again.
func (in *inbox) take(ctx context.Context, n int) []jetstream.Msg {
	if in.off || ctx.Err() != nil {
		return nil
	}
	if in.cons == nil {
		c, err := in.bus.Inbox(ctx, in.workerID)
		if errors.Is(err, bus.ErrNoInboxes) {
			in.log.Warn().Msg("the farm has no worker inboxes: jobs are handed on through the shared queue (run `a2farm farm init` to add them)")
			in.off = true
			return nil
		}
		if err != nil {
			in.log.Warn().Err(err).Msg("opening this worker's inbox failed; retrying")
			return nil
		}
		in.cons = c
	}
	batch, err := in.cons.FetchNoWait(n)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			in.cons = nil
		}
		return nil
	}
	var out []jetstream.Msg
	for msg := range batch.Messages() {
		out = append(out, msg)
	}
	if err := batch.Error(); errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
		in.cons = nil
	}
	return out
}

// maxHandoffs bounds how often one job is passed on: a worker hands a job
// only to one that has not declined it, so it runs out of candidates
// first unless heartbeats keep advertising what nobody can do.
const maxHandoffs = 16

// handOff passes a job this worker cannot play to the live worker best
// placed to play it: one that can (canPlay), has not declined the job, and
// has the most free slots, through that worker's inbox; ties are broken at
// random so that hand-offs spread. It reports false when no such worker
// is live. The caller acknowledges msg after a true answer.
func (w *farmWorker) handOff(ctx context.Context, job schema.Job, msg jetstream.Msg, why string, canPlay func(bus.Heartbeat) bool) (bool, error) {
	if job.Handoffs >= maxHandoffs {
		return false, nil
	}
	live, err := w.cfg.Bus.LiveWorkers(ctx)
	if err != nil {
		return false, RetryAfter(fmt.Errorf("read live workers: %w", err), 2*time.Second)
	}
	declined := append(slices.Clone(bus.Declined(msg)), w.cfg.WorkerID)
	var best []bus.Heartbeat
	bestFree := 0
	for _, hb := range live {
		if slices.Contains(declined, hb.ID) || !canPlay(hb) {
			continue
		}
		free := hb.Capacity - hb.Active
		switch {
		case len(best) == 0 || free > bestFree:
			best, bestFree = []bus.Heartbeat{hb}, free
		case free == bestFree:
			best = append(best, hb)
		}
	}
	if len(best) == 0 {
		return false, nil
	}
	to := best[rand.IntN(len(best))].ID
	err = w.cfg.Bus.HandOffTo(ctx, job, to, declined)
	if errors.Is(err, bus.ErrNoInboxes) {
		to, err = "", w.cfg.Bus.HandOff(ctx, job)
	}
	if err != nil {
		return false, RetryAfter(err, 2*time.Second)
	}
	w.cfg.Log.Info().Str("job", job.JobID).Str("to", to).Str("why", why).Msg("job handed to another worker")
	w.mu.Lock()
	w.handedOff++
	w.mu.Unlock()
	if w.cfg.OnHandOff != nil {
		w.cfg.OnHandOff(why)
	}
	return true, nil
}

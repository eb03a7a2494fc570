package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Transient reports whether a JetStream call's error is the server's
// "not now": no responders while a stream or meta leader is being elected,
// a request that timed out, a connection being re-established, or an API
// error Permanent does not call permanent (JetStream busy, no leader yet).
// Errors that are not JetStream's (a manifest that does not decode, a
// closed connection) are neither: waiting would not change them. Nor is
// "not found": it is an answer (no such stream, consumer, bucket or key),
// which the caller decides about.
func Transient(err error) bool {
	if err == nil || Permanent(err) {
		return false
	}
	for _, answer := range []error{jetstream.ErrStreamNotFound, jetstream.ErrConsumerNotFound, jetstream.ErrBucketNotFound,
		jetstream.ErrKeyNotFound, jetstream.ErrObjectNotFound} {
		if errors.Is(err, answer) {
			return false
		}
	}
	for _, t := range []error{nats.ErrNoResponders, nats.ErrTimeout, context.DeadlineExceeded,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, jetstream.ErrNoStreamResponse} {
		if errors.Is(err, t) {
			return true
		}
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}

// RetryOptions tune Retry.
type RetryOptions struct {
	// Attempt bounds one call of op (0: only ctx does). A request to a
	// stream whose cluster has no leader may get no answer at all rather
	// than "no responders": without a bound its first attempt would wait
	// for the whole of ctx.
	Attempt time.Duration
	// OnRetry, when set, is told the first transient error only, so that
	// a command logs a wait once.
	OnRetry func(error)
}

// AttemptTimeout is the bound of one JetStream request the roles retry:
// twice the client's default request timeout.
const AttemptTimeout = 10 * time.Second

// Retry runs op until it succeeds or fails for good: an error that is not
// Transient, or the end of ctx (the command's deadline, a stop request),
// which is returned with op's last error. Transient errors are waited out
// with a back-off from 100 ms doubling to 5 s.
func Retry(ctx context.Context, o RetryOptions, op func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for told := false; ; told = true {
		err := attempt(ctx, o.Attempt, op)
		if !Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (waiting out: %w)", ctx.Err(), err)
		}
		if !told && o.OnRetry != nil {
			o.OnRetry(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting out: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func attempt(ctx context.Context, limit time.Duration, op func(context.Context) error) error {
	if limit <= 0 {
		return op(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return op(ctx)
}

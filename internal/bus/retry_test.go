package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/natstest"
)

func TestTransient(t *testing.T) {
	syntax := json.Unmarshal([]byte("{"), &struct{}{})
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read run q: %w", nats.ErrNoResponders), true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{nats.ErrConnectionReconnecting, true},
		{&jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 500, Description: "no leader"}, true},
		{&jetstream.APIError{Code: 400, Description: "bad request"}, false},
		{&jetstream.APIError{Code: 503, Description: "feature not supported"}, false},
		{fmt.Errorf("run q: %w", jetstream.ErrKeyNotFound), false},
		{fmt.Errorf("no a2farm topology on this server: %w", jetstream.ErrStreamNotFound), false},
		{nats.ErrConnectionClosed, false},
		{nats.ErrAuthorization, false},
		{syntax, false},
		{errors.New("run q iteration 0: invalid character"), false},
		{nil, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	var told []error
	calls := 0
	err := Retry(ctx, RetryOptions{OnRetry: func(err error) { told = append(told, err) }}, func(context.Context) error {
		if calls++; calls < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 3 || len(told) != 1 {
		t.Errorf("transient twice then ok: err %v after %d calls, told %d times; want nil, 3, 1", err, calls, len(told))
	}

	calls = 0
	bad := errors.New("manifest does not decode")
	if err := Retry(ctx, RetryOptions{}, func(context.Context) error { calls++; return bad }); !errors.Is(err, bad) || calls != 1 {
		t.Errorf("a final error: %v after %d calls, want it at once", err, calls)
	}

	// An attempt that gets no answer is cut at Attempt and tried again.
	calls = 0
	err = Retry(ctx, RetryOptions{Attempt: 20 * time.Millisecond}, func(ctx context.Context) error {
		if calls++; calls == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Errorf("a hanging attempt: err %v after %d calls, want nil after 2", err, calls)
	}

	// The end of ctx ends the wait, with both errors.
	stop, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = Retry(stop, RetryOptions{}, func(context.Context) error { return nats.ErrNoResponders })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after the deadline: %v, want the deadline and the last error", err)
	}
}

// TestAFarmWithoutTopologyIsNotWaitedFor: a role attaching to a server
// that has no farm is told so, not left waiting for a topology nobody
// will create.
func TestAFarmWithoutTopologyIsNotWaitedFor(t *testing.T) {
	_, js := natstest.New(t)
	_, err := Attach(context.Background(), js)
	if err == nil || Transient(err) {
		t.Fatalf("Attach to a server without a farm: %v (transient %v), want a final error", err, Transient(err))
	}
}

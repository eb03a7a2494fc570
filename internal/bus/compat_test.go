package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/natstest"
)

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		have string
		ok   bool
	}{
		{"2.11.2", true}, {"2.11.15", true}, {"2.11.1", false}, {"2.11.0", false}, {"2.12.15", true}, {"2.14.10", true}, {"v2.15.2", true}, {"3.0.0", true},
		{"2.12.0-RC.1", true}, {"2.10.27", false}, {"2.9.25", false}, {"2.9.10", false}, {"1.99.99", false},
		{"", false}, {"2.11", false}, {"garbage", false},
	} {
		if got := versionAtLeast(tc.have, MinServerVersion); got != tc.ok {
			t.Errorf("versionAtLeast(%q, %q) = %t, want %t", tc.have, MinServerVersion, got, tc.ok)
		}
	}
}

// TestTheEmbeddedServerIsRecent: the server a2farm embeds (nats, up, the
// tests) passes its own check, and the refusal names both versions.
func TestTheEmbeddedServerIsRecent(t *testing.T) {
	nc, _ := natstest.New(t)
	if err := CheckServer(nc); err != nil {
		t.Fatal(err)
	}
	msg := (&ServerTooOldError{Server: "nats://h:4222", Found: "2.9.25", Required: MinServerVersion}).Error()
	want := "NATS server nats://h:4222 runs nats-server 2.9.25; a2farm needs " + MinServerVersion + " or newer"
	if len(msg) < len(want) || msg[:len(want)] != want {
		t.Errorf("refusal %q, want it to start %q", msg, want)
	}
}

// TestPermanentErrorsEndTransientOnesWait classifies errors a real server
// returns, and the client's own.
func TestPermanentErrorsEndTransientOnesWait(t *testing.T) {
	conn, js := natstest.New(t)
	ctx := context.Background()
	b, err := Open(ctx, js, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// A request the server refuses as invalid: a consumer that starts at
	// a sequence it does not name.
	_, badRequest := b.Jobs.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bad",
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, AckPolicy: jetstream.AckExplicitPolicy})
	if badRequest == nil {
		t.Fatal("the server took a consumer without its start sequence")
	}
	_, notFound := js.Stream(ctx, "NO_SUCH_STREAM")
	nc, err := nats.Connect(conn.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	_, noResponders := nc.Request("nobody.listens", nil, time.Second)
	closed, _ := jetstream.New(nc)
	nc.Close()
	_, closedErr := closed.Stream(ctx, JobsStream)
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	_, timeout := js.Stream(short, JobsStream)
	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"bad request (400)", badRequest, true},
		{"wrapped bad request", fmt.Errorf("learner consumer: %w", badRequest), true},
		{"multiple filter subjects on 2.9", fmt.Errorf("follow: %w", jetstream.ErrConsumerMultipleFilterSubjectsNotSupported), true},
		{"jetstream not enabled", jetstream.ErrJetStreamNotEnabled, true},
		{"permission", fmt.Errorf("publish: %w", nats.ErrPermissionViolation), true},
		{"not permitted (403)", &jetstream.APIError{Code: 403, Description: "not authorized"}, true},
		{"stream not found yet", notFound, false},
		{"no responders", noResponders, false},
		{"closed connection", closedErr, false},
		{"timeout", timeout, false},
		{"no leader yet (503)", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, false},
		{"nil", nil, false},
	} {
		if tc.err == nil && tc.name != "nil" {
			t.Errorf("%s: the server returned no error", tc.name)
			continue
		}
		if got := Permanent(tc.err); got != tc.permanent {
			t.Errorf("%s (%v): permanent %t, want %t", tc.name, tc.err, got, tc.permanent)
		}
	}
}

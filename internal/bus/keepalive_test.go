package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/natstest"
)

// TestKeepAlive: a message worked on for three ack waits is not delivered
// again while it is kept alive, and is once KeepAlive stops and the ack
// wait passes without an acknowledgement.
func TestKeepAlive(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.New(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}})
	if err != nil {
		t.Fatal(err)
	}
	const ackWait = time.Second
	cons, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "keep.a", []byte("work")); err != nil {
		t.Fatal(err)
	}
	next := func(wait time.Duration) jetstream.Msg {
		t.Helper()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			return msg
		}
		return nil
	}
	msg := next(time.Second)
	if msg == nil {
		t.Fatal("the message was not delivered")
	}
	stop := KeepAlive(ackWait, msg)
	if again := next(3 * ackWait); again != nil {
		t.Fatal("the message was delivered again while kept alive")
	}
	stop()
	again := next(3 * ackWait)
	if again == nil {
		t.Fatal("the message was not delivered again after KeepAlive stopped")
	}
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Errorf("delivery metadata %+v (%v); want the second delivery", md, err)
	}
}

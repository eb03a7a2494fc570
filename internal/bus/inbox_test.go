package bus

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/schema"
)

func TestInboxTokensAreSafeAndDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct{ id, want string }{
		{"gpu-node-7", "gpu-node-7"},
		{"host_12345", "host_12345"},
		{"a.b", ""}, // changed, so hashed
		{"a_b", "a_b"},
		{"a b", ""},
		{"w/1*>", ""},
		{"", ""},
	} {
		got := inboxToken(tc.id)
		if tc.want != "" && got != tc.want {
			t.Errorf("inboxToken(%q) = %q, want %q", tc.id, got, tc.want)
		}
		for _, r := range got {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				t.Errorf("inboxToken(%q) = %q holds %q", tc.id, got, r)
			}
		}
		if other, dup := seen[got]; dup {
			t.Errorf("workers %q and %q share inbox %q", other, tc.id, got)
		}
		seen[got] = tc.id
	}
}

// TestAHandOffReachesItsWorkerOnly: a job handed to a worker waits in
// that worker's inbox (not the shared queue, not another inbox), is
// stored once however often the same hand-off is published, and carries
// who declined it; moved back to the queue it keeps that list.
func TestAHandOffReachesItsWorkerOnly(t *testing.T) {
	b, _ := open(t, DefaultConfig())
	ctx := context.Background()
	job := schema.Job{JobID: "r/0/i/0", RunID: "r", Attempt: 1, Handoffs: 2}
	for range 3 {
		if err := b.HandOffTo(ctx, job, "w.2", []string{"w1", "w3"}); err != nil {
			t.Fatal(err)
		}
	}
	if q, err := b.Queue(ctx); err != nil || q.Pending != 0 || q.Handed != 1 {
		t.Fatalf("queue %+v (%v): want nothing pending and one job handed", q, err)
	}
	other, err := b.Inbox(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if batch, _ := other.FetchNoWait(10); batch != nil {
		for range batch.Messages() {
			t.Error("another worker's inbox delivered the job")
		}
	}
	mine, err := b.Inbox(ctx, "w.2")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := mine.Next(jetstream.FetchMaxWait(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeJob(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Handoffs != 3 || !FromInbox(msg) || !reflect.DeepEqual(Declined(msg), []string{"w1", "w3"}) {
		t.Errorf("handed job: %d hand-offs, from inbox %t, declined %v", got.Handoffs, FromInbox(msg), Declined(msg))
	}
	if err := b.MoveToQueue(ctx, got, Declined(msg)); err != nil {
		t.Fatal(err)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	back, err := b.Consumer.Next(jetstream.FetchMaxWait(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	moved, _ := DecodeJob(back)
	if moved.Handoffs != 4 || FromInbox(back) || !reflect.DeepEqual(Declined(back), []string{"w1", "w3"}) {
		t.Errorf("moved job: %d hand-offs, from inbox %t, declined %v", moved.Handoffs, FromInbox(back), Declined(back))
	}
}

// TestAFarmWithoutInboxesRefusesNamedHandOffs: a farm made before inboxes
// existed has none after Attach, and says so rather than losing the job.
func TestAFarmWithoutInboxesRefusesNamedHandOffs(t *testing.T) {
	_, js := open(t, DefaultConfig())
	ctx := context.Background()
	if err := js.DeleteStream(ctx, InboxStream); err != nil {
		t.Fatal(err)
	}
	old, err := Attach(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.HandOffTo(ctx, schema.Job{JobID: "j", RunID: "r"}, "w", nil); err != ErrNoInboxes {
		t.Errorf("HandOffTo on a farm without inboxes: %v, want ErrNoInboxes", err)
	}
	if n, err := old.RescueInboxes(ctx); n != 0 || err != nil {
		t.Errorf("RescueInboxes on a farm without inboxes: %d, %v", n, err)
	}
}

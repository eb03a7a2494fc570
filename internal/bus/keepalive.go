package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeepAlive tells the server that msgs are being worked on, every third of
// ackWait until stop is called, so that slow work (building a large
// snapshot, archiving a batch on a slow disk) does not get them
// redelivered while a short ack wait still brings back soon a delivery
// that was lost on the wire. Progress on a message already acknowledged
// is ignored by the server.
func KeepAlive(ackWait time.Duration, msgs ...jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(max(100*time.Millisecond, ackWait/3))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, msg := range msgs {
					_ = msg.InProgress()
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

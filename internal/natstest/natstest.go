// Package natstest starts a real embedded NATS server with JetStream for
// tests: random port, store in the test's temporary folder, shut down by
// the test's cleanup. There are no NATS mocks in a2farm.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/internal/embednats"
)

// Server starts a JetStream server and returns it; opts may adjust the
// options (auth, limits) before it starts.
func Server(t testing.TB, opts ...func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	for _, f := range opts {
		f(o)
	}
	s, err := embednats.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { embednats.Stop(s) })
	return s
}

// New starts a server and returns a connection and a JetStream context,
// both closed by the test's cleanup.
func New(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := Server(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

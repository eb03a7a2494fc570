// Package embednats runs a NATS server with JetStream inside the a2farm
// process: `a2farm nats`, `a2farm up` and the tests start theirs here,
// with one start-up check and one shutdown.
package embednats

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// serverStartTimeout bounds how long an embedded server may take to accept
// connections (a JetStream store is recovered before it does).
const serverStartTimeout = 20 * time.Second

// Start runs a NATS server in this process and returns once it accepts
// connections. The process, not the server, owns signals.
func Start(opts *server.Options) (*server.Server, error) {
	o := *opts
	o.NoSigs = true
	s, err := server.NewServer(&o)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	if !o.NoLog {
		s.ConfigureLogger() // the server's own log, on standard error
	}
	go s.Start()
	if !s.ReadyForConnections(serverStartTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("nats server did not accept connections on %s:%d within %s", o.Host, o.Port, serverStartTimeout)
	}
	return s, nil
}

// Stop shuts the server down and waits until it has.
func Stop(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

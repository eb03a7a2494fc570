package main

import (
	"context"
	"fmt"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/telemetry"
	"github.com/a2farm/a2farm/worker/policy"
)

// metricsFlags serve /metrics and /healthz from a long-running command.
type metricsFlags struct{ addr string }

func (f *metricsFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "metrics-addr", envOr("A2FARM_METRICS_ADDR", ""),
		"serve Prometheus /metrics and /healthz on this address, e.g. :9464 (env A2FARM_METRICS_ADDR; empty: off)")
}

// start serves in the background and returns the instruments to feed
// (also when serving is off, so callers need no branches) and a function
// that stops the server and waits for it; call it on every return path.
func (f *metricsFlags) start(ctx context.Context, e *env, nc *nats.Conn, b *bus.Bus) (*telemetry.Metrics, func(), error) {
	m := telemetry.New()
	m.WatchQueue(b.QueueDepth)
	m.WatchLearner(b.LearnerBacklog)
	if f.addr == "" {
		return m, func() {}, nil
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	healthy := func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("not connected to NATS (%s)", nc.Status())
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := telemetry.Serve(ctx, ln, m, healthy, e.log); err != nil {
			e.log.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	return m, func() { cancel(); <-done }, nil
}

// farmMember is a long-running farm command's hold on the farm: the
// topology on its NATS connection and the metrics it serves.
type farmMember struct {
	bus     *bus.Bus
	metrics *telemetry.Metrics
	// leave stops the metrics server and closes the connection.
	leave func()
}

// joinFarm connects to NATS as name, opens the topology and starts the
// metrics server; call leave on every return path.
func joinFarm(ctx context.Context, e *env, nf *natsFlags, mf *metricsFlags, name string) (*farmMember, error) {
	nf.onWait = func(err error) {
		e.log.Warn().Err(err).Msg("JetStream answers 'not now' (a cluster electing a leader, a node restarting); waiting")
	}
	nc, b, err := nf.connect(ctx, name)
	if err != nil {
		return nil, err
	}
	metrics, stopMetrics, err := mf.start(ctx, e, nc, b)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &farmMember{bus: b, metrics: metrics, leave: func() { stopMetrics(); nc.Close() }}, nil
}

// replicaMetrics reads a registry's policy servers for the metrics.
func replicaMetrics(reg *policy.Registry) func() []telemetry.Replica {
	return func() []telemetry.Replica {
		var out []telemetry.Replica
		for _, r := range reg.Replicas() {
			out = append(out, telemetry.Replica{Model: r.Model, URL: r.URL, InFlight: r.InFlight, Requests: r.Requests,
				Errors: r.Errors, Healthy: r.Healthy})
		}
		return out
	}
}

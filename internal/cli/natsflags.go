package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/bus"
)

// natsFlags are the connection and topology flags of every farm command.
type natsFlags struct {
	url, user, creds, nkeySeed, tlsCA, tlsCert, tlsKey string
	cfg                                                bus.Config
}

func (n *natsFlags) bind(cmd *cobra.Command) {
	n.bindConnection(cmd)
	n.cfg = bus.DefaultConfig()
	f := cmd.Flags()
	f.IntVar(&n.cfg.Replicas, "replicas", n.cfg.Replicas, "replicas of every stream and bucket (1 embedded, 3 on a cluster)")
	f.DurationVar(&n.cfg.AckWait, "ack-wait", n.cfg.AckWait, "how long a job may go without progress before redelivery")
	f.IntVar(&n.cfg.MaxDeliver, "max-deliver", n.cfg.MaxDeliver, "deliveries before a job is dead-lettered")
	f.DurationVar(&n.cfg.DedupWindow, "dedup-window", n.cfg.DedupWindow, "duplicate-detection window of the streams")
	f.IntVar(&n.cfg.MaxMsgSize, "max-msg-size", n.cfg.MaxMsgSize, "largest trajectory message; larger ones go through the object store")
	f.DurationVar(&n.cfg.HeartbeatTTL, "heartbeat-ttl", n.cfg.HeartbeatTTL, "worker heartbeat lifetime")
}

// bindConnection binds only the connection flags, for commands that
// attach to an existing topology.
func (n *natsFlags) bindConnection(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&n.url, "nats", envOr("A2FARM_NATS", nats.DefaultURL), "NATS server URL(s), comma-separated (env A2FARM_NATS)")
	f.StringVar(&n.user, "nats-user", envOr("A2FARM_NATS_USER", ""), "user name; the password comes from A2FARM_NATS_PASSWORD")
	f.StringVar(&n.creds, "nats-creds", envOr("A2FARM_NATS_CREDS", ""), "credentials file (JWT + nkey)")
	f.StringVar(&n.nkeySeed, "nats-nkey", envOr("A2FARM_NATS_NKEY", ""), "nkey seed file")
	f.StringVar(&n.tlsCA, "nats-tls-ca", envOr("A2FARM_NATS_TLS_CA", ""), "CA certificate for TLS")
	f.StringVar(&n.tlsCert, "nats-tls-cert", envOr("A2FARM_NATS_TLS_CERT", ""), "client certificate for mutual TLS")
	f.StringVar(&n.tlsKey, "nats-tls-key", envOr("A2FARM_NATS_TLS_KEY", ""), "client key for mutual TLS")
}

// connect dials NATS with the security options and opens the topology.
// The token (A2FARM_NATS_TOKEN) and password (A2FARM_NATS_PASSWORD) come
// from the environment only, so they never show in process listings.
func (n *natsFlags) connect(ctx context.Context, name string) (*nats.Conn, *bus.Bus, error) {
	if err := n.cfg.Validate(); err != nil {
		return nil, nil, &usageError{err}
	}
	return n.dial(ctx, name, func(js jetstream.JetStream) (*bus.Bus, error) { return bus.Open(ctx, js, n.cfg) })
}

// attach dials NATS and opens the existing topology without changing it.
func (n *natsFlags) attach(ctx context.Context, name string) (*nats.Conn, *bus.Bus, error) {
	return n.dial(ctx, name, func(js jetstream.JetStream) (*bus.Bus, error) { return bus.Attach(ctx, js) })
}

func (n *natsFlags) dial(ctx context.Context, name string, open func(jetstream.JetStream) (*bus.Bus, error)) (*nats.Conn, *bus.Bus, error) {
	opts := []nats.Option{nats.Name("a2farm " + name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)}
	if n.user != "" {
		opts = append(opts, nats.UserInfo(n.user, os.Getenv("A2FARM_NATS_PASSWORD")))
	}
	if tok := os.Getenv("A2FARM_NATS_TOKEN"); tok != "" {
		opts = append(opts, nats.Token(tok))
	}
	if n.creds != "" {
		opts = append(opts, nats.UserCredentials(n.creds))
	}
	if n.nkeySeed != "" {
		o, err := nats.NkeyOptionFromSeed(n.nkeySeed)
		if err != nil {
			return nil, nil, &usageError{fmt.Errorf("--nats-nkey: %w", err)}
		}
		opts = append(opts, o)
	}
	if n.tlsCA != "" {
		opts = append(opts, nats.RootCAs(n.tlsCA))
	}
	if n.tlsCert != "" || n.tlsKey != "" {
		opts = append(opts, nats.ClientCert(n.tlsCert, n.tlsKey))
	}
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", n.url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	b, err := open(js)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, b, nil
}

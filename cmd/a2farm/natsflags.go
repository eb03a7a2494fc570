package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
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
	// cmd tells which topology flags were given explicitly.
	cmd *cobra.Command
	// onWait is told when the server first answers "not now" at start-up
	// (a command's log; nil: nothing said).
	onWait func(error)
}

func (n *natsFlags) bind(cmd *cobra.Command) {
	n.bindConnection(cmd)
	n.bindTopology(cmd)
}

// bindTopology binds the farm's settings. The owner of the topology
// (`farm init`, `nats`) applies them; every other role only checks that
// the ones it was given agree with the farm's.
func (n *natsFlags) bindTopology(cmd *cobra.Command) {
	n.cmd = cmd
	n.cfg = bus.DefaultConfig()
	f := cmd.Flags()
	f.IntVar(&n.cfg.Replicas, "replicas", n.cfg.Replicas, "replicas of every stream and bucket (1 embedded, 3 on a cluster)")
	f.DurationVar(&n.cfg.AckWait, "ack-wait", n.cfg.AckWait, "how long a job may go without progress before redelivery")
	f.IntVar(&n.cfg.MaxDeliver, "max-deliver", n.cfg.MaxDeliver, "deliveries before a job is dead-lettered")
	f.IntVar(&n.cfg.MaxInFlight, "max-in-flight", n.cfg.MaxInFlight, "jobs delivered and not yet acknowledged across the farm; keep it above the workers' summed --concurrency")
	f.DurationVar(&n.cfg.DedupWindow, "dedup-window", n.cfg.DedupWindow, "duplicate-detection window of the streams")
	f.IntVar(&n.cfg.MaxMsgSize, "max-msg-size", n.cfg.MaxMsgSize, "largest trajectory message; larger ones go through the object store")
	f.DurationVar(&n.cfg.HeartbeatTTL, "heartbeat-ttl", n.cfg.HeartbeatTTL, "worker heartbeat lifetime")
	f.DurationVar(&n.cfg.TrajMaxAge, "log-max-age", n.cfg.TrajMaxAge, "how long the trajectory log and its large payloads are kept (0: forever; the learner's archive is the durable copy)")
	f.DurationVar(&n.cfg.IndexMaxAge, "index-max-age", n.cfg.IndexMaxAge, "how long a built index stays in the farm's shared index store (0: forever)")
	f.Int64Var(&n.cfg.IndexMaxBytes, "index-max-bytes", n.cfg.IndexMaxBytes, "bound on the shared index store (0: none; when full, workers keep new indexes to themselves)")
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

// connect dials NATS and attaches to the farm's topology without changing
// it; a topology flag given on the command line must agree with the
// farm's setting, or the command refuses to start and names it. The
// token (A2FARM_NATS_TOKEN) and password (A2FARM_NATS_PASSWORD) come from
// the environment only, so they never show in process listings.
func (n *natsFlags) connect(ctx context.Context, name string) (*nats.Conn, *bus.Bus, error) {
	nc, b, err := n.attach(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if err := n.agree(b.Config()); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, b, nil
}

// own dials NATS and creates or changes the topology to the flags' settings:
// only the owner of a farm does this (`farm init`, `nats`, `up`).
func (n *natsFlags) own(ctx context.Context, name string) (*nats.Conn, *bus.Bus, error) {
	if err := n.cfg.Validate(); err != nil {
		return nil, nil, &usageError{err}
	}
	return n.dial(ctx, name, func(ctx context.Context, js jetstream.JetStream) (*bus.Bus, error) { return bus.Open(ctx, js, n.cfg) })
}

// agree checks the explicitly given topology flags against the farm's.
func (n *natsFlags) agree(farm bus.Config) error {
	if n.cmd == nil {
		return nil
	}
	for _, d := range bus.Differences(farm, n.cfg) {
		if n.cmd.Flags().Changed(d.Flag) {
			return usagef("--%s %s disagrees with the farm's %s; change the farm with `a2farm farm init --%s %s`, or leave the flag out",
				d.Flag, d.Want, d.Have, d.Flag, d.Want)
		}
	}
	return nil
}

// attach dials NATS and opens the existing topology without changing it.
func (n *natsFlags) attach(ctx context.Context, name string) (*nats.Conn, *bus.Bus, error) {
	return n.dial(ctx, name, func(ctx context.Context, js jetstream.JetStream) (*bus.Bus, error) { return bus.Attach(ctx, js) })
}

func (n *natsFlags) dial(ctx context.Context, name string, open func(context.Context, jetstream.JetStream) (*bus.Bus, error)) (*nats.Conn, *bus.Bus, error) {
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
	if os.Getenv("A2FARM_NATS_PASSWORD") != "" && n.user == "" {
		return nil, nil, usagef("A2FARM_NATS_PASSWORD is set but no user (--nats-user or A2FARM_NATS_USER): refusing to connect without the authentication you meant")
	}
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", redactURLs(n.url), redactErr(err, n.url))
	}
	if err := bus.CheckServer(nc); err != nil {
		nc.Close()
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	// A server that answers "not now" (a cluster electing a leader, a node
	// restarting) is waited out until ctx ends; what it refuses for good,
	// or a farm without the topology, ends the command.
	var b *bus.Bus
	err = bus.Retry(ctx, bus.RetryOptions{Attempt: bus.AttemptTimeout, OnRetry: n.onWait}, func(ctx context.Context) (err error) {
		b, err = open(ctx, js)
		return err
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, b, nil
}

// redactURLs drops credentials from comma-separated server URLs.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = url.User("REDACTED")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// redactErr removes any password in urls from an error's text; the error
// underneath is kept for errors.Is.
func redactErr(err error, urls string) error {
	msg := err.Error()
	for _, p := range strings.Split(urls, ",") {
		if u, perr := url.Parse(strings.TrimSpace(p)); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "REDACTED")
			}
		}
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/embednats"
)

// natsOptions are the flags of `a2farm nats`.
type natsOptions struct {
	store, host string
	port        int
	// A node of a cluster: its name, where it listens for routes, the
	// routes to the other nodes and the cluster's name.
	name, cluster, routes, clusterName string
	serverLog                          bool
	nf                                 natsFlags
}

// clusterFormTimeout bounds how long a cluster node waits for JetStream
// to elect a leader before it gives up creating the topology.
const clusterFormTimeout = 2 * time.Minute

func newNatsCmd(e *env) *cobra.Command {
	var o natsOptions
	cmd := &cobra.Command{
		Use:   "nats [--store DIR] [--port P] [--name N --cluster HOST:PORT --routes URLS]",
		Short: "Run a standalone embedded NATS JetStream server, or one node of a cluster, for multi-process setups",
		Long: `nats serves JetStream on host:port with its store in --store until stopped. Clients
authenticate with A2FARM_NATS_USER/A2FARM_NATS_PASSWORD or A2FARM_NATS_TOKEN when those
are set in this server's environment.

With --cluster it is one node of a JetStream cluster: give every node its own --name,
--store and --cluster listen address, the same --routes (every node's route URL,
nats-route://HOST:PORT, comma-separated) and --replicas 3 for a 3-node cluster. Nodes
may start in any order; each waits for the cluster to elect a JetStream leader, then
creates or updates the topology. For production clusters, run nats-server with
deploy/nats/*.conf.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runNats(cmd.Context(), e, &o) },
	}
	o.nf.bindTopology(cmd)
	f := cmd.Flags()
	f.StringVar(&o.store, "store", ".run/nats", "JetStream store folder")
	f.StringVar(&o.host, "host", "127.0.0.1", "listen address")
	f.IntVar(&o.port, "port", 4222, "listen port (-1: random)")
	f.StringVar(&o.name, "name", "", "this server's name (required with --cluster; unique in the cluster)")
	f.StringVar(&o.cluster, "cluster", "", "listen for cluster routes on HOST:PORT: this server is one node of a cluster")
	f.StringVar(&o.routes, "routes", "", "the cluster's route URLs, comma-separated (nats-route://HOST:PORT)")
	f.StringVar(&o.clusterName, "cluster-name", "a2farm", "the cluster's name")
	f.BoolVar(&o.serverLog, "server-log", false, "print the NATS server's own log on standard error")
	return service(cmd)
}

// serverOptions turns the flags into the embedded server's options.
func (o *natsOptions) serverOptions() (*server.Options, error) {
	opts := &server.Options{Host: o.host, Port: o.port, JetStream: true, StoreDir: o.store, NoSigs: true, NoLog: !o.serverLog,
		ServerName: o.name}
	user, password := envOr("A2FARM_NATS_USER", ""), envOr("A2FARM_NATS_PASSWORD", "")
	if (user == "") != (password == "") {
		return nil, usagef("set both A2FARM_NATS_USER and A2FARM_NATS_PASSWORD, or neither: half of them would serve with no authentication")
	}
	if user != "" {
		opts.Username, opts.Password = user, password
	}
	if tok := envOr("A2FARM_NATS_TOKEN", ""); tok != "" {
		opts.Authorization = tok
	}
	if o.cluster == "" {
		if o.routes != "" {
			return nil, usagef("--routes needs --cluster HOST:PORT, this node's own route listener")
		}
		return opts, nil
	}
	if o.name == "" {
		return nil, usagef("--cluster needs --name: every node of a JetStream cluster has its own")
	}
	host, portText, err := net.SplitHostPort(o.cluster)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port < 1 {
		return nil, usagef("--cluster %q: want HOST:PORT", o.cluster)
	}
	routes := server.RoutesFromStr(o.routes)
	if strings.TrimSpace(o.routes) == "" || len(routes) == 0 {
		return nil, usagef("--cluster needs --routes: the route URLs of the cluster's nodes")
	}
	opts.Cluster = server.ClusterOpts{Name: o.clusterName, Host: host, Port: port}
	opts.Routes = routes
	return opts, nil
}

// errTopologyIncomplete marks a cluster whose leader has not finished
// creating the topology.
var errTopologyIncomplete = errors.New("the farm's topology is not complete yet")

// awaitTopology succeeds once the cluster's leader has created the whole
// topology, and fails as connect does when this node's flags disagree.
func (o *natsOptions) awaitTopology(ctx context.Context) error {
	nc, b, err := o.nf.connect(ctx, "nats")
	if err != nil {
		return err
	}
	nc.Close()
	if b.Inboxes == nil || b.Indexes == nil {
		return errTopologyIncomplete
	}
	return nil
}

func runNats(ctx context.Context, e *env, o *natsOptions) error {
	if err := o.nf.cfg.Validate(); err != nil {
		return &usageError{err}
	}
	opts, err := o.serverOptions()
	if err != nil {
		return err
	}
	ns, err := embednats.Start(opts)
	if err != nil {
		return err
	}
	defer embednats.Stop(ns)
	// This server's farm is owned here: create or change its topology to
	// the flags' settings. On a cluster only the JetStream leader does
	// (nodes that create the same replicated streams at once time each
	// other out); the other nodes wait until the topology is there and
	// check that their flags agree with it.
	o.nf.url, o.nf.user = ns.ClientURL(), opts.Username
	before, existed := bus.Config{}, false
	if o.cluster == "" {
		if nc, b, err := o.nf.attach(ctx, "nats"); err == nil {
			before, existed = b.Config(), true
			nc.Close()
		}
	}
	deadline := time.Now().Add(clusterFormTimeout)
	for waited := false; ; waited = true {
		// A replicated stream takes a cluster seconds to place and elect
		// a leader for: more than the client's default API timeout. A
		// node that only looks waits a few seconds at a time.
		leader := o.cluster == "" || ns.JetStreamIsLeader()
		octx, cancel := context.WithTimeout(ctx, min(time.Until(deadline), 5*time.Second))
		if leader {
			octx, cancel = context.WithTimeout(ctx, time.Until(deadline))
		}
		var err error
		switch {
		case leader:
			var b *bus.Bus
			var nc interface{ Close() }
			if nc, b, err = o.nf.own(octx, "nats"); err == nil {
				nc.Close()
				err = printFarmConfig(e, before, existed, b.Config())
			}
		default:
			err = o.awaitTopology(octx)
		}
		cancel()
		if err == nil {
			break
		}
		var ue *usageError
		if o.cluster == "" || errors.As(err, &ue) || bus.Permanent(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		if !waited {
			e.log.Info().Err(err).Msg("waiting for the cluster to elect a JetStream leader and create the topology")
		} else {
			e.log.Debug().Err(err).Msg("the cluster has no topology yet")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Last, once the topology exists: whoever waits for this line may
	// start roles at once.
	fmt.Fprintf(e.stdout, "nats listening on %s (store %s)\n", ns.ClientURL(), o.store)
	<-ctx.Done()
	return nil
}

package main

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/embednats"
)

func newNatsCmd(e *env) *cobra.Command {
	var store, host string
	var port int
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "nats [--store DIR] [--port P]",
		Short: "Run a standalone embedded NATS JetStream server for multi-process setups",
		Long: `nats serves JetStream on host:port with its store in --store until stopped. Clients
authenticate with A2FARM_NATS_USER/A2FARM_NATS_PASSWORD or A2FARM_NATS_TOKEN when those
are set in this server's environment. For production clusters, run nats-server with
deploy/nats/*.conf.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := nf.cfg.Validate(); err != nil {
				return &usageError{err}
			}
			opts := &server.Options{Host: host, Port: port, JetStream: true, StoreDir: store, NoSigs: true, NoLog: true}
			user, password := envOr("A2FARM_NATS_USER", ""), envOr("A2FARM_NATS_PASSWORD", "")
			if (user == "") != (password == "") {
				return usagef("set both A2FARM_NATS_USER and A2FARM_NATS_PASSWORD, or neither: half of them would serve with no authentication")
			}
			if user != "" {
				opts.Username, opts.Password = user, password
			}
			if tok := envOr("A2FARM_NATS_TOKEN", ""); tok != "" {
				opts.Authorization = tok
			}
			ns, err := embednats.Start(opts)
			if err != nil {
				return err
			}
			// This server's farm is owned here: create or change its
			// topology to the flags' settings.
			nf.url, nf.user = ns.ClientURL(), user
			before, existed := bus.Config{}, false
			if nc, b, err := nf.attach(cmd.Context(), "nats"); err == nil {
				before, existed = b.Config(), true
				nc.Close()
			}
			nc, b, err := nf.own(cmd.Context(), "nats")
			if err != nil {
				embednats.Stop(ns)
				return err
			}
			nc.Close()
			if err := printFarmConfig(e, before, existed, b.Config()); err != nil {
				return err
			}
			// Last, once the topology exists: whoever waits for this line
			// may start roles at once.
			fmt.Fprintf(e.stdout, "nats listening on %s (store %s)\n", ns.ClientURL(), store)
			<-cmd.Context().Done()
			embednats.Stop(ns)
			return nil
		},
	}
	nf.bindTopology(cmd)
	cmd.Flags().StringVar(&store, "store", ".run/nats", "JetStream store folder")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "listen address")
	cmd.Flags().IntVar(&port, "port", 4222, "listen port (-1: random)")
	return cmd
}

package cli

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"
)

func newNatsCmd(e *env) *cobra.Command {
	var store, host string
	var port int
	cmd := &cobra.Command{
		Use:   "nats [--store DIR] [--port P]",
		Short: "Run a standalone embedded NATS JetStream server for multi-process setups",
		Long: `nats serves JetStream on host:port with its store in --store until stopped. Clients
authenticate with A2FARM_NATS_USER/A2FARM_NATS_PASSWORD or A2FARM_NATS_TOKEN when those
are set in this server's environment. For production clusters, run nats-server with
deploy/nats/*.conf.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := &server.Options{Host: host, Port: port, JetStream: true, StoreDir: store, NoSigs: true, NoLog: true}
			if u := envOr("A2FARM_NATS_USER", ""); u != "" {
				opts.Username, opts.Password = u, envOr("A2FARM_NATS_PASSWORD", "")
			}
			if tok := envOr("A2FARM_NATS_TOKEN", ""); tok != "" {
				opts.Authorization = tok
			}
			ns, err := server.NewServer(opts)
			if err != nil {
				return &usageError{err}
			}
			go ns.Start()
			if !ns.ReadyForConnections(10 * time.Second) {
				return fmt.Errorf("NATS did not start on %s:%d", host, port)
			}
			fmt.Fprintf(e.stdout, "nats listening on %s (store %s)\n", ns.ClientURL(), store)
			<-cmd.Context().Done()
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "store", ".run/nats", "JetStream store folder")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "listen address")
	cmd.Flags().IntVar(&port, "port", 4222, "listen port (-1: random)")
	return cmd
}

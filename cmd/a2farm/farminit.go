package main

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/bus"
)

func newFarmCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "farm",
		Short: "Own the farm's topology on a NATS server or cluster",
		Args:  cobra.NoArgs,
	}
	var nf natsFlags
	init := &cobra.Command{
		Use:   "init --nats URL [--replicas 3] [--ack-wait D] [--max-deliver N] ...",
		Short: "Create the farm's streams, consumer and buckets, or change their settings",
		Long: `init is the one command that creates or changes a farm's topology (a2farm nats
does it for its embedded server). Coordinators, workers and learners attach to what it made
and refuse to start, naming the setting, when a topology flag they were given disagrees.
Run it again with other flags to change a setting; it prints what changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			before, existed := bus.Config{}, false
			if nc, b, err := nf.attach(ctx, "farm init"); err == nil {
				before, existed = b.Config(), true
				nc.Close()
			} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
			nc, b, err := nf.own(ctx, "farm init")
			if err != nil {
				return err
			}
			defer nc.Close()
			return printFarmConfig(e, before, existed, b.Config())
		},
	}
	nf.bind(init)
	cmd.AddCommand(init)
	return cmd
}

func printFarmConfig(e *env, before bus.Config, existed bool, after bus.Config) error {
	switch diffs := bus.Differences(before, after); {
	case !existed:
		fmt.Fprintln(e.stdout, "farm topology created")
	case len(diffs) == 0:
		fmt.Fprintln(e.stdout, "farm topology unchanged")
	default:
		for _, d := range diffs {
			fmt.Fprintf(e.stdout, "changed --%s: %s → %s\n", d.Flag, d.Have, d.Want)
		}
	}
	c := after
	fmt.Fprintf(e.stdout, "replicas %d, ack-wait %s, max-deliver %d, dedup-window %s, max-msg-size %d, heartbeat-ttl %s\n",
		c.Replicas, c.AckWait, c.MaxDeliver, c.DedupWindow, c.MaxMsgSize, c.HeartbeatTTL)
	return nil
}

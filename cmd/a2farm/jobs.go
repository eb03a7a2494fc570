package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/schema"
)

func newJobsCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Manage the job queue",
	}
	cmd.AddCommand(newJobsRetryCmd(e))
	return cmd
}

func newJobsRetryCmd(e *env) *cobra.Command {
	var nf natsFlags
	var runID string
	cmd := &cobra.Command{
		Use:   "retry --run ID",
		Short: "Queue a run's dead-lettered jobs again as their next attempt",
		Long: `A job that fails --max-deliver deliveries is dead-lettered: the learner records an
infra_error trajectory for it so its group can close. retry queues each such job again
with its attempt number raised; when the new attempt succeeds, the learner replaces the
infra_error in the archive and rewrites the group's shard.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if runID == "" {
				return usagef("--run is required")
			}
			nc, b, err := nf.attach(ctx, "jobs retry")
			if err != nil {
				return err
			}
			defer nc.Close()
			runs, err := b.ListRuns(ctx)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(runs, func(m schema.RunManifest) bool { return m.RunID == runID }) {
				return fmt.Errorf("no run %q on this farm (a2farm status lists the runs)", runID)
			}
			jobs, err := b.RetryDead(ctx, runID)
			for _, j := range jobs {
				e.log.Info().Str("job", j.JobID).Int64("attempt", j.Attempt).Msg("requeued")
			}
			if err != nil {
				return fmt.Errorf("retry after %d jobs: %w", len(jobs), err)
			}
			fmt.Fprintf(e.stdout, "requeued %d dead jobs of run %s\n", len(jobs), runID)
			return nil
		},
	}
	nf.bindConnection(cmd)
	cmd.Flags().StringVar(&runID, "run", "", "run whose dead jobs to requeue")
	return cmd
}

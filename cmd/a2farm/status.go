package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/coordinator/iterate"
	"github.com/a2farm/a2farm/coordinator/statuspage"
	"github.com/a2farm/a2farm/internal/bus"
)

func newStatusCmd(e *env) *cobra.Command {
	var nf natsFlags
	var runID string
	var watch time.Duration
	var asJSON bool
	var until, httpAddr, loopDir string
	cmd := &cobra.Command{
		Use:   "status [--run ID] [--watch 5s] [--json] [--until answered|sharded] [--http ADDR] [--iterate DIR]",
		Short: "Show queue depth, live workers and the progress of each run",
		Long: `status prints the farm's state: the job queue, live workers and their load, each run's
progress and ETA, and the learner's backlog. --watch repeats it; --until waits for a run.

--http ADDR serves the same as a live page that refreshes itself, with the queue depth over
the last hour, until interrupted. It is read-only and binds to loopback when ADDR has no host
(:8090); give 0.0.0.0:8090 to expose it.

--iterate DIR prints instead the state of the a2farm iterate loop in DIR (no farm needed: it
reads DIR/iterate.json, also while the loop runs on its embedded farm): the rounds trained
and playing, with the version playing each, the rows trained by staleness, and each side's
idle time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if watch < 0 {
				return usagef("--watch must be a positive interval")
			}
			switch until {
			case "":
			case "answered", "sharded":
				if runID == "" {
					return usagef("--until needs --run")
				}
				if watch == 0 {
					watch = 2 * time.Second
				}
			default:
				return usagef("--until %q: want answered or sharded", until)
			}
			if loopDir != "" {
				return watchLoop(ctx, e, loopDir, watch, asJSON)
			}
			if httpAddr != "" {
				if _, err := statuspage.ListenAddr(httpAddr); err != nil {
					return &usageError{err}
				}
			}
			nc, b, err := nf.attach(ctx, "status")
			if err != nil {
				return err
			}
			defer nc.Close()
			if httpAddr != "" {
				serve, err := statusPage(e, httpAddr, b, runID)
				if err != nil {
					return err
				}
				return serve(ctx)
			}
			// A one-shot report waits out a passing fault (a cluster
			// electing a leader after a node restarts) for a while.
			oneShotUntil := time.Now().Add(oneShotPatience)
			for {
				st, err := coordinator.Status(ctx, b, runID, time.Now())
				if err != nil && watch == 0 && !bus.Permanent(err) && ctx.Err() == nil && time.Now().Before(oneShotUntil) {
					e.log.Debug().Err(err).Msg("no status from the farm yet; asking again")
					select {
					case <-ctx.Done():
					case <-time.After(500 * time.Millisecond):
					}
					continue
				}
				switch {
				case err != nil && (watch == 0 || bus.Permanent(err) || ctx.Err() != nil):
					return err
				case err != nil:
					// Watching outlives a cluster's leader election or a
					// restarting server: say so and ask again.
					e.log.Warn().Err(err).Msg("no status from the farm; asking again")
				case asJSON:
					if err := json.NewEncoder(e.stdout).Encode(st); err != nil {
						return err
					}
				default:
					printStatus(e.stdout, st)
				}
				if err == nil && (watch == 0 || until != "" && reached(st, until)) {
					return nil
				}
				select {
				case <-ctx.Done():
					if until != "" {
						return &interruptedError{fmt.Sprintf("run %s is not %s yet", runID, until)}
					}
					return nil // a watch ends when it is stopped
				case <-time.After(watch):
				}
				if !asJSON && err == nil {
					fmt.Fprintln(e.stdout)
				}
			}
		},
	}
	nf.bindConnection(cmd)
	cmd.Flags().StringVar(&runID, "run", "", "show only this run")
	cmd.Flags().DurationVar(&watch, "watch", 0, "repeat every interval until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per report")
	cmd.Flags().StringVar(&loopDir, "iterate", "", "print the state of the a2farm iterate loop in this folder (its iterate.json) instead of the farm's")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve a live status page on this address (loopback unless a host is given) until interrupted")
	cmd.Flags().StringVar(&until, "until", "", "with --run: report until every job has a trajectory (answered) or every group its shard (sharded), then exit 0")
	return cmd
}

// oneShotPatience is how long a single status report asks again through
// transient errors before it fails.
const oneShotPatience = 15 * time.Second

// statusPage binds the live page's address at once (a bad or busy one
// fails before anything starts) and returns the function that serves the
// farm behind b there until ctx ends.
func statusPage(e *env, addr string, b *bus.Bus, runID string) (serve func(context.Context) error, err error) {
	ln, err := statuspage.Listen(addr)
	if err != nil {
		return nil, &usageError{err}
	}
	fmt.Fprintf(e.stdout, "status page at %s\n", statuspage.URL(ln))
	cfg := statuspage.Config{Log: e.log, Status: func(ctx context.Context, now time.Time) (*coordinator.FarmStatus, error) {
		return coordinator.Status(ctx, b, runID, now)
	}}
	return func(ctx context.Context) error { return statuspage.Serve(ctx, ln, cfg) }, nil
}

// reached reports whether every run shown is answered or sharded.
func reached(st *coordinator.FarmStatus, until string) bool {
	for _, r := range st.Runs {
		if r.Accounted < r.Expected || until == "sharded" && r.Sharded < r.Groups {
			return false
		}
	}
	return len(st.Runs) > 0
}

func printStatus(w io.Writer, st *coordinator.FarmStatus) {
	capacity, active := 0, 0
	for _, hb := range st.Workers {
		capacity += hb.Capacity
		active += hb.Active
	}
	handed := ""
	if st.HandedOff > 0 {
		handed = fmt.Sprintf(", %d handed to a worker", st.HandedOff)
	}
	fmt.Fprintf(w, "%s  queue: %d pending, %d in flight, %d redelivered%s; workers: %d live, %d/%d episodes running\n",
		st.At.Format(time.RFC3339), st.Pending, st.InFlight, st.Redelivered, handed, len(st.Workers), active, capacity)
	switch l := st.Learner; {
	case !l.Started:
		fmt.Fprintln(w, "learner: not started yet")
	case l.Active:
		fmt.Fprintf(w, "learner: receiving since %s; %d trajectories waiting, %d being archived\n",
			l.Since.Local().Format(time.TimeOnly), l.Backlog, l.Unacked)
	case l.Backlog > 0:
		fmt.Fprintf(w, "learner: none receiving; %d trajectories waiting (is a learner running?)\n", l.Backlog)
	default:
		fmt.Fprintln(w, "learner: nothing waiting")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.Workers) > 0 {
		fmt.Fprintln(tw, "WORKER\tHOST\tACTIVE\tPLAYED\tHANDED ON\tINDEXES\tPOLICIES\tVERSION\tLAST SEEN")
		for _, hb := range st.Workers {
			active := fmt.Sprintf("%d/%d", hb.Active, hb.Capacity)
			if slices.Contains(st.Silent, hb.ID) {
				active = "silent" // its last report is stale: it stopped or lost the server
			}
			indexes := fmt.Sprintf("%d (%.0f/%.0f MiB)", hb.Indexes, float64(hb.IndexBytes)/(1<<20), float64(hb.IndexBudget)/(1<<20))
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s ago\n", hb.ID, hb.Host, active, hb.Done, hb.HandedOff, indexes,
				strings.Join(hb.Policies, ","), hb.Version, st.At.Sub(hb.Updated).Round(time.Second))
		}
	}
	if replicas := replicaRows(st.Workers); len(replicas) > 0 {
		tw.Flush() // a table of its own: its columns are not the workers'
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REPLICA\tMODEL\tWORKER\tEPISODES\tREQUESTS\tERRORS\tHEALTH")
		for _, r := range replicas {
			fmt.Fprintln(tw, r)
		}
	}
	if len(st.Runs) > 0 {
		fmt.Fprintln(tw, "RUN\tITERATION\tDONE\tDEAD\tSHARDED\tPER MIN\tETA\tCREATED")
		for _, r := range st.Runs {
			eta := "-"
			if r.ETA > 0 {
				eta = r.ETA.Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%d\t%d/%d\t%.1f\t%s\t%s\n", r.RunID, r.Iteration, r.Accounted, r.Expected, r.Dead,
				r.Sharded, r.Groups, r.PerMinute, eta, r.Created.Format(time.RFC3339))
		}
	}
	tw.Flush()
	for _, f := range st.FailingShards {
		fmt.Fprintf(w, "shard missing: %s/%d/%s failed %d times (retried %s): %s\n", f.Run, f.Iteration, f.Instance,
			f.Failures, f.NextRetry.Local().Format(time.TimeOnly), f.Error)
	}
	for _, hb := range st.Workers {
		if len(hb.Lacks) > 0 {
			fmt.Fprintf(w, "worker %s lacks (passes their jobs on): %s\n", hb.ID, strings.Join(hb.Lacks, ", "))
		}
	}
	for _, r := range st.Runs {
		reasons := slices.Sorted(maps.Keys(r.DeadReasons))
		for _, why := range reasons {
			text := why
			if text == "" {
				text = "ran out of deliveries"
			}
			fmt.Fprintf(w, "run %s: %d dead (requeue with `a2farm jobs retry`): %s\n", r.RunID, r.DeadReasons[why], text)
		}
	}
}

// replicaRows are the policy servers each live worker reports, one
// tab-separated row per worker and server.
func replicaRows(workers []bus.Heartbeat) []string {
	var rows []string
	for _, hb := range workers {
		for _, r := range hb.Replicas {
			health := "ok"
			if !r.Healthy {
				health = "failing (backing off)"
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d\t%s", r.URL, r.Model, hb.ID, r.InFlight, r.Requests, r.Errors, health))
		}
	}
	return rows
}

// watchLoop prints the state of the iterate loop in dir, once or every
// watch until interrupted.
func watchLoop(ctx context.Context, e *env, dir string, watch time.Duration, asJSON bool) error {
	for {
		st, err := iterate.Load(dir)
		switch {
		case err != nil:
			return err
		case st == nil:
			return usagef("--iterate %s: no iterate run there (no %s)", dir, iterate.StateName)
		case asJSON:
			if err := json.NewEncoder(e.stdout).Encode(st.Status()); err != nil {
				return err
			}
		default:
			printLoop(e.stdout, dir, st)
		}
		if watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watch):
		}
		if !asJSON {
			fmt.Fprintln(e.stdout)
		}
	}
}

// printLoop prints a loop's state: its rounds and their staleness when it
// is asynchronous, its last finished step when not.
func printLoop(w io.Writer, dir string, st *iterate.State) {
	s := st.Status()
	if s.Async == nil {
		last := "none"
		if n := len(st.Done); n > 0 {
			d := st.Done[n-1]
			last = fmt.Sprintf("%s, step %s, at %s", iterate.IterationName(d.Iteration), d.Step, d.At.Format(time.RFC3339))
		}
		fmt.Fprintf(w, "loop %s: synchronous; %d steps finished, the last: %s\n", dir, len(st.Done), last)
		return
	}
	newest := "none yet"
	if s.Newest >= 0 {
		newest = fmt.Sprintf("it%d", s.Newest)
	}
	playing := make([]string, len(s.Playing))
	for i, p := range s.Playing {
		playing[i] = fmt.Sprintf("round %d (played by %s)", p.Round, versionName(p.Acting))
	}
	if len(playing) == 0 {
		playing = []string{"none"}
	}
	fmt.Fprintf(w, "loop %s: %d rounds trained, newest adapter %s; playing: %s\n", dir, s.Trained, newest, strings.Join(playing, ", "))
	fmt.Fprintf(w, "  %s\n", s.Async)
}

func versionName(v int) string {
	if v < 0 {
		return "the base model"
	}
	return fmt.Sprintf("it%d", v)
}

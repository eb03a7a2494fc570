package worker

import (
	"context"
	"io"

	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/repoindex"
	"github.com/a2farm/a2farm/worker/tools"
)

// play runs one job's episode on its snapshot's index: the farm and
// localize differ only in where jobs come from and trajectories go.
// parent is the record a branch job replays (nil for a base sample). A
// tool set that cannot be built is the job's fault (Permanent); a
// cancelled context is returned as is.
func play(ctx context.Context, job schema.Job, parent *schema.Trajectory, idx *repoindex.Index, model agent.Model, workerID string, onTurn func(schema.Turn)) (schema.Trajectory, error) {
	set, err := tools.New(idx, tools.Options{Enabled: job.Tools, ProblemStatement: job.ProblemStatement})
	if err != nil {
		return schema.Trajectory{}, Permanent(err)
	}
	if c, ok := model.(io.Closer); ok {
		defer c.Close() // frees the episode's policy server
	}
	if p, ok := model.(interface{ PreferReplica(string) }); ok && parent != nil {
		p.PreferReplica(parentReplica(parent, job.Fork.Turn))
	}
	tr, err := agent.Run(ctx, agent.JobConfig(job), agent.Episode{Job: job, Tools: set, Graph: idx.Graph, Model: model,
		Parent: parent, OnTurn: onTurn})
	if err != nil {
		return schema.Trajectory{}, err
	}
	tr.WorkerID = workerID
	return tr, nil
}

// parentReplica names the policy server that answered the parent's last
// turn before the fork: it holds the branch's prefix in its cache.
func parentReplica(parent *schema.Trajectory, forkTurn int64) string {
	for i := min(int(forkTurn), len(parent.Turns)) - 1; i >= 0; i-- {
		if r := parent.Turns[i].Replica; r != "" {
			return r
		}
	}
	return ""
}

package worker

import (
	"context"

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
	tr, err := agent.Run(ctx, agent.JobConfig(job), agent.Episode{Job: job, Tools: set, Graph: idx.Graph, Model: model,
		Parent: parent, OnTurn: onTurn})
	if err != nil {
		return schema.Trajectory{}, err
	}
	tr.WorkerID = workerID
	return tr, nil
}

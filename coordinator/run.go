package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/schema"
)

// RunConfig configures the publication of a run.
type RunConfig struct {
	Bus       *bus.Bus
	RunID     string
	Iteration int64
	Instances []schema.Instance
	Gold      map[string]schema.Locations
	Samples   int
	// Spec is what acts in every job, and the limits of its episodes.
	Spec schema.RunSpec
	// Progress, when set, is told about every published job.
	Progress func(done, total int)
}

// Publish stores the run manifest and publishes issue × N jobs. Job ids
// are message ids, so running it again (a restarted coordinator) queues
// nothing twice.
func Publish(ctx context.Context, cfg RunConfig) (*schema.RunManifest, error) {
	switch {
	case cfg.Bus == nil:
		return nil, errors.New("coordinator: a bus is required")
	case cfg.RunID == "":
		return nil, &ConfigError{errors.New("a run id is required (--run)")}
	case cfg.Samples < 1:
		return nil, &ConfigError{fmt.Errorf("samples must be >= 1, got %d", cfg.Samples)}
	case len(cfg.Instances) == 0:
		return nil, &ConfigError{errors.New("the dataset has no valid instance")}
	}
	m := &schema.RunManifest{RunID: cfg.RunID, Iteration: cfg.Iteration, Samples: cfg.Samples, Gold: cfg.Gold,
		Spec: cfg.Spec, Created: time.Now().UTC()}
	for _, in := range cfg.Instances {
		m.Instances = append(m.Instances, in.InstanceID)
	}
	m.Expected = len(cfg.Instances) * cfg.Samples
	if err := cfg.Bus.PutRun(ctx, m); err != nil {
		return nil, err
	}
	done := 0
	for _, in := range cfg.Instances {
		for s := range int64(cfg.Samples) {
			if err := cfg.Bus.PublishJob(ctx, cfg.Spec.Job(cfg.RunID, cfg.Iteration, in, s)); err != nil {
				return nil, err
			}
			done++
			if cfg.Progress != nil {
				cfg.Progress(done, m.Expected)
			}
		}
	}
	return m, nil
}

// Accounted counts the jobs of a run iteration that have a trajectory in
// the log (infra_error ones included); it reaches the manifest's Expected
// exactly when every job has been answered, retried jobs once.
func Accounted(ctx context.Context, b *bus.Bus, runID string, iteration int64) (int, error) {
	return b.TrajectoryCount(ctx, runID, iteration)
}

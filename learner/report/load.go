package report

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
)

// Source kinds.
const (
	// KindFarm is a learner output folder (or an `up` folder holding one):
	// archive/<run>/<iteration>/<instance>/<sample>.arrow and the shard
	// manifests beside it.
	KindFarm = "farm"
	// KindLocalize is a `localize` output folder: trajectories/*.arrow.
	KindLocalize = "localize"
)

// Source is one folder's trajectories and what else it knows: the gold its
// shards were labelled against and when each group closed.
type Source struct {
	Label, Dir, Kind string
	Trajectories     []schema.Trajectory
	// Gold maps instance ids to the gold recorded in the shard manifests
	// (farm folders); the caller may add more.
	Gold map[string]schema.Locations
	// Closed lists the groups whose shards are written (farm folders).
	Closed []GroupClosed
	// Training is the trainer run of an adapter folder (KindTrainer).
	Training *TrainingRun
}

// GroupClosed is one group's shard manifest: when it was written.
type GroupClosed struct {
	Run        string
	Iteration  int64
	InstanceID string
	At         time.Time
}

// Load reads a learner output folder, an `up` folder (its learner/
// sub-folder), a `localize` folder or an adapter folder a2farm-train wrote.
func Load(dir string) (*Source, error) {
	src := &Source{Label: filepath.Base(filepath.Clean(dir)), Dir: dir, Gold: map[string]schema.Locations{}}
	switch {
	case isFile(filepath.Join(dir, TrainManifestName)):
		src.Kind = KindTrainer
		var err error
		src.Training, err = loadTraining(dir)
		return src, err
	case isDir(filepath.Join(dir, "learner", "archive")):
		return src, src.loadFarm(filepath.Join(dir, "learner"))
	case isDir(filepath.Join(dir, "archive")):
		return src, src.loadFarm(dir)
	case isDir(filepath.Join(dir, "trajectories")):
		src.Kind = KindLocalize
		trs, err := schema.ReadTrajectoryDir(filepath.Join(dir, "trajectories"))
		if err != nil {
			return nil, err
		}
		src.Trajectories = trs
		return src, nil
	}
	return nil, fmt.Errorf("%s: not a run folder: want archive/ (a learner's output), learner/archive/ (up's), trajectories/ (localize's) or %s (an adapter a2farm-train wrote)", dir, TrainManifestName)
}

func (src *Source) loadFarm(learnerDir string) error {
	src.Kind = KindFarm
	groups, err := filepath.Glob(filepath.Join(learnerDir, "archive", "*", "*", "*"))
	if err != nil {
		return err
	}
	for _, g := range groups {
		trs, err := schema.ReadTrajectoryDir(g)
		if err != nil {
			return err
		}
		src.Trajectories = append(src.Trajectories, trs...)
	}
	if len(src.Trajectories) == 0 {
		return fmt.Errorf("%s: no archived trajectories", learnerDir)
	}
	manifests, err := filepath.Glob(filepath.Join(learnerDir, "shards", "*", "*", "*", shard.ManifestName))
	if err != nil {
		return err
	}
	for _, path := range manifests {
		m, err := learner.ReadShardManifest(filepath.Dir(path))
		if err != nil {
			return err
		}
		s := m.Source
		if s.Instance == "" {
			continue // written by replay, which records an archive, not a group
		}
		src.Closed = append(src.Closed, GroupClosed{Run: s.Run, Iteration: s.Iteration, InstanceID: s.Instance, At: m.Created})
		if s.Gold != nil {
			src.Gold[s.Instance] = *s.Gold
		}
	}
	slices.SortFunc(src.Closed, func(a, b GroupClosed) int { return a.At.Compare(b.At) })
	return nil
}

func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return err == nil && info.IsDir()
}

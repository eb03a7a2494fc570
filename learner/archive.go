package learner

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/schema"
)

// The learner's archive is a tree, one file per job:
// archive/RUN/ITERATION/INSTANCE/SAMPLE.arrow, where RUN and INSTANCE are
// the ids as subject tokens (bus.Token) and the file holds the real ones.

// ArchivePath is where the learner under out archives a trajectory.
func ArchivePath(out string, tr schema.Trajectory) string {
	return filepath.Join(out, "archive", bus.Token(tr.RunID), strconv.FormatInt(tr.Iteration, 10), bus.Token(tr.InstanceID),
		fmt.Sprintf("%d.arrow", tr.Sample))
}

// ArchiveFilter picks trajectories from an archive; a zero field picks
// all. Iteration is a pointer because iteration 0 is a real one.
type ArchiveFilter struct {
	Run       string
	Iteration *int64
	Instance  string
}

func (f ArchiveFilter) match(tr schema.Trajectory) bool {
	return (f.Run == "" || tr.RunID == f.Run) && (f.Iteration == nil || tr.Iteration == *f.Iteration) &&
		(f.Instance == "" || tr.InstanceID == f.Instance)
}

// String says what the filter asks for, as the flags would.
func (f ArchiveFilter) String() string {
	var parts []string
	if f.Run != "" {
		parts = append(parts, "--run "+f.Run)
	}
	if f.Iteration != nil {
		parts = append(parts, fmt.Sprintf("--iteration %d", *f.Iteration))
	}
	if f.Instance != "" {
		parts = append(parts, "--instance "+f.Instance)
	}
	return strings.Join(parts, " ")
}

// skips reports whether a folder of the learner's tree can hold nothing
// the filter wants; depth is 1 for a run folder, 2 for an iteration and
// 3 for an instance. Folder names are tokens of the ids, so this only
// prunes: the trajectories themselves are matched after reading.
func (f ArchiveFilter) skips(depth int, name string) bool {
	switch depth {
	case 1:
		return f.Run != "" && name != bus.Token(f.Run)
	case 2:
		return f.Iteration != nil && name != strconv.FormatInt(*f.Iteration, 10)
	case 3:
		return f.Instance != "" && name != bus.Token(f.Instance)
	}
	return false
}

// archiveContents summarizes what an archive holds: per run, per
// iteration, how many trajectories of how many instances.
type archiveContents struct {
	Runs map[string]map[int64]*iterationContents
}

// iterationContents is one run iteration in an archive.
type iterationContents struct {
	Trajectories int
	Instances    map[string]bool
}

func (c *archiveContents) add(tr schema.Trajectory) {
	if c.Runs == nil {
		c.Runs = map[string]map[int64]*iterationContents{}
	}
	its := c.Runs[tr.RunID]
	if its == nil {
		its = map[int64]*iterationContents{}
		c.Runs[tr.RunID] = its
	}
	it := its[tr.Iteration]
	if it == nil {
		it = &iterationContents{Instances: map[string]bool{}}
		its[tr.Iteration] = it
	}
	it.Trajectories++
	it.Instances[tr.InstanceID] = true
}

// String lists the runs and iterations, e.g.
// "run a: iteration 0 (24 trajectories, 6 instances), iteration 1 (…)".
func (c *archiveContents) String() string {
	if len(c.Runs) == 0 {
		return "no trajectories"
	}
	var runs []string
	for _, run := range slices.Sorted(maps.Keys(c.Runs)) {
		var its []string
		for _, n := range slices.Sorted(maps.Keys(c.Runs[run])) {
			it := c.Runs[run][n]
			its = append(its, fmt.Sprintf("iteration %d (%d trajectories, %d instances)", n, it.Trajectories, len(it.Instances)))
		}
		runs = append(runs, fmt.Sprintf("run %s: %s", run, strings.Join(its, ", ")))
	}
	return strings.Join(runs, "; ")
}

// ReadArchive reads the trajectories under dir that the filter picks:
// dir may be the learner's archive tree (or its output folder, or any
// run or iteration folder in the tree) or a flat folder of .arrow files
// (what localize writes). Files outside the learner's layout are read
// whole. When nothing matches, the error says what dir holds instead.
func ReadArchive(dir string, f ArchiveFilter) ([]schema.Trajectory, error) {
	if st, err := os.Stat(filepath.Join(dir, "archive")); err == nil && st.IsDir() {
		if flat, _ := filepath.Glob(filepath.Join(dir, "*.arrow")); len(flat) == 0 {
			dir = filepath.Join(dir, "archive") // the learner's output folder
		}
	}
	picked, files, err := readArchive(dir, f)
	if err != nil || len(picked) > 0 {
		return picked, err
	}
	if (f != ArchiveFilter{}) {
		// Pruned folders were not read: say what the whole archive holds.
		var everything []schema.Trajectory
		if everything, files, err = readArchive(dir, ArchiveFilter{}); err != nil {
			return nil, err
		}
		if len(everything) > 0 {
			var contents archiveContents
			for _, tr := range everything {
				contents.add(tr)
			}
			return nil, fmt.Errorf("no trajectory under %s matches %s; it holds %s", dir, f, contents.String())
		}
	}
	if files == 0 {
		return nil, fmt.Errorf("no .arrow trajectory files under %s (a learner's --out folder holds them in archive/RUN/ITERATION/INSTANCE/; localize writes them in its trajectories/ folder)", dir)
	}
	return nil, fmt.Errorf("the %d trajectory files under %s hold no trajectories", files, dir)
}

// readArchive walks dir, skipping the folders of the learner's tree the
// filter rules out, and returns the trajectories it picks and how many
// files it read.
func readArchive(dir string, f ArchiveFilter) (picked []schema.Trajectory, files int, err error) {
	base := archiveDepth(dir)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && base >= 0 && f.skips(base+depthBelow(dir, path), d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".arrow") {
			return nil
		}
		trs, err := schema.ReadTrajectoryFile(path)
		if err != nil {
			return err
		}
		files++
		for _, tr := range trs {
			if f.match(tr) {
				picked = append(picked, tr)
			}
		}
		return nil
	})
	if err != nil {
		return nil, files, fmt.Errorf("read archive %s: %w", dir, err)
	}
	return picked, files, nil
}

// archiveDepth tells where dir sits in the learner's tree: 0 for the
// archive folder itself, 1 inside a run, 2 inside an iteration, 3 inside
// an instance; -1 when dir is not in such a tree (a flat folder).
func archiveDepth(dir string) int {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return -1
	}
	parts := strings.Split(filepath.ToSlash(abs), "/")
	for i := len(parts) - 1; i >= 0 && i >= len(parts)-4; i-- {
		if parts[i] == "archive" {
			depth := len(parts) - 1 - i
			if depth == 2 { // ITERATION must be a number
				if _, err := strconv.ParseInt(parts[len(parts)-1], 10, 64); err != nil {
					return -1
				}
			}
			return depth
		}
	}
	return -1
}

// depthBelow counts the folders from dir down to path.
func depthBelow(dir, path string) int {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == "." {
		return 0
	}
	return strings.Count(filepath.ToSlash(rel), "/") + 1
}

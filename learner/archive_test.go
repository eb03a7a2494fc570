package learner

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/schema"
)

// writeArchived stores trajectories where the learner under out would.
func writeArchived(t *testing.T, out string, trs ...schema.Trajectory) {
	t.Helper()
	for _, tr := range trs {
		rec := schema.EncodeTrajectories(nil, tr)
		err := atomicfile.Write(ArchivePath(out, tr), func(w io.Writer) error { return schema.WriteIPC(w, schema.TrajectorySchema(), rec) })
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadArchivePicksRunsIterationsAndInstances(t *testing.T) {
	out := t.TempDir()
	var all []schema.Trajectory
	for _, run := range []string{"sweep.a", "base"} { // "sweep.a" is stored as the token sweep_a
		for it := range int64(2) {
			for _, inst := range []string{"org__repo-1", "org__repo-2"} {
				for sample := range int64(3) {
					all = append(all, schema.Trajectory{JobID: schema.JobID(run, it, inst, sample), RunID: run, Iteration: it,
						InstanceID: inst, Sample: sample, Status: schema.StatusOK})
				}
			}
		}
	}
	writeArchived(t, out, all...)
	// A stray file the learner never writes is left alone.
	if err := os.WriteFile(filepath.Join(out, "archive", "README"), []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	one := int64(1)
	zero := int64(0)
	archive := filepath.Join(out, "archive")
	for _, tc := range []struct {
		name   string
		dir    string
		filter ArchiveFilter
		want   int
	}{
		{"the whole tree", archive, ArchiveFilter{}, 24},
		{"the learner's output folder", out, ArchiveFilter{}, 24},
		{"one run", archive, ArchiveFilter{Run: "sweep.a"}, 12},
		{"one run, iteration 0", archive, ArchiveFilter{Run: "sweep.a", Iteration: &zero}, 6},
		{"iteration 1 of every run", archive, ArchiveFilter{Iteration: &one}, 12},
		{"one instance of one run iteration", out, ArchiveFilter{Run: "base", Iteration: &one, Instance: "org__repo-2"}, 3},
		{"a run folder", filepath.Join(archive, "base"), ArchiveFilter{Iteration: &one}, 6},
		{"an iteration folder", filepath.Join(archive, "base", "0"), ArchiveFilter{Instance: "org__repo-1"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadArchive(tc.dir, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("%d trajectories, want %d", len(got), tc.want)
			}
			for _, tr := range got {
				if !tc.filter.match(tr) {
					t.Errorf("%s does not match %s", tr.JobID, tc.filter)
				}
			}
		})
	}

	two := int64(2)
	for _, tc := range []struct {
		filter ArchiveFilter
		want   string
	}{
		{ArchiveFilter{Run: "nope"}, "matches --run nope; it holds run base: iteration 0 (6 trajectories, 2 instances), " +
			"iteration 1 (6 trajectories, 2 instances); run sweep.a: iteration 0 (6 trajectories, 2 instances), iteration 1 (6 trajectories, 2 instances)"},
		{ArchiveFilter{Run: "base", Iteration: &two}, "matches --run base --iteration 2; it holds run base: iteration 0"},
		{ArchiveFilter{Instance: "org__repo-9"}, "matches --instance org__repo-9; it holds"},
	} {
		_, err := ReadArchive(out, tc.filter)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadArchive(%s): %v, want an error saying %q", tc.filter, err, tc.want)
		}
	}
	if _, err := ReadArchive(t.TempDir(), ArchiveFilter{}); err == nil || !strings.Contains(err.Error(), "no .arrow trajectory files") {
		t.Errorf("an empty folder: %v", err)
	}
}

// TestReadArchiveReadsAFlatFolder: localize's trajectories/ folder, files
// named anyhow, is filtered by the ids inside.
func TestReadArchiveReadsAFlatFolder(t *testing.T) {
	dir := t.TempDir()
	for i, run := range []string{"a", "a", "b"} {
		tr := schema.Trajectory{JobID: fmt.Sprint(i), RunID: run, InstanceID: "x", Status: schema.StatusOK}
		rec := schema.EncodeTrajectories(nil, tr)
		if err := atomicfile.Write(filepath.Join(dir, fmt.Sprintf("%d.arrow", i)), func(w io.Writer) error {
			return schema.WriteIPC(w, schema.TrajectorySchema(), rec)
		}); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	got, err := ReadArchive(dir, ArchiveFilter{Run: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tr := range got {
		ids = append(ids, tr.JobID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"0", "1"}) {
		t.Errorf("run a of the flat folder: %v", ids)
	}
}

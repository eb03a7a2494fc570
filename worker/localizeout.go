package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/schema"
)

// localizeManifest is localize.json: what a localization run in an
// output folder was, so that a resume continues the same run.
type localizeManifest struct {
	RunID       string         `json:"run_id"`
	Samples     int            `json:"samples"`
	FirstSample int64          `json:"first_sample,omitempty"`
	Spec        schema.RunSpec `json:"spec"`
}

const localizeManifestName = "localize.json"

// OutInUseError is an output folder that holds a localization run which
// was not asked to be resumed, or one that a resume cannot continue.
type OutInUseError struct {
	Out    string
	Reason string
}

func (e *OutInUseError) Error() string { return fmt.Sprintf("--out %s %s", e.Out, e.Reason) }

// openLocalizeOut prepares out for a run described by m. Without resume
// out must hold no run; with it, out's run must be m (or out empty), and
// the trajectories it finished are returned by instance. Those recorded
// as infra_error (the farm's failure, not the policy's) are played again.
func openLocalizeOut(out string, m localizeManifest, resume bool) (map[string][]schema.Trajectory, error) {
	trajDir := filepath.Join(out, "trajectories")
	used, err := holdsRun(out)
	if err != nil {
		return nil, err
	}
	if used && !resume {
		return nil, &OutInUseError{Out: out, Reason: "holds a localize run; pass --resume to continue it, or choose another --out"}
	}
	want, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	done := map[string][]schema.Trajectory{}
	if used {
		have, err := os.ReadFile(filepath.Join(out, localizeManifestName))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, &OutInUseError{Out: out, Reason: "holds trajectories but no " + localizeManifestName + " (written by an older a2farm); it cannot be resumed"}
		case err != nil:
			return nil, err
		case !bytes.Equal(bytes.TrimSpace(have), bytes.TrimSpace(want)):
			return nil, &OutInUseError{Out: out, Reason: "was run with other settings (" + manifestDifference(have, m) + "); resume it with the same flags, or choose another --out"}
		}
		paths, err := filepath.Glob(filepath.Join(trajDir, "*.arrow"))
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			trs, err := schema.ReadTrajectoryFile(p)
			if err != nil {
				return nil, fmt.Errorf("resume: %s: %w", p, err)
			}
			for _, tr := range trs {
				if tr.Status != schema.StatusInfraError {
					done[tr.InstanceID] = append(done[tr.InstanceID], tr)
				}
			}
		}
	}
	if err := os.MkdirAll(trajDir, 0o755); err != nil {
		return nil, err
	}
	err = atomicfile.Write(filepath.Join(out, localizeManifestName), func(w io.Writer) error {
		_, err := w.Write(append(want, '\n'))
		return err
	})
	return done, err
}

// holdsRun reports whether out holds a localization run's files.
func holdsRun(out string) (bool, error) {
	for _, name := range []string{localizeManifestName, "loc_outputs.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			return true, nil
		}
	}
	entries, err := os.ReadDir(filepath.Join(out, "trajectories"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) > 0, nil
}

// manifestDifference names the settings of the stored manifest that differ
// from m, for the refusal.
func manifestDifference(stored []byte, m localizeManifest) string {
	var have localizeManifest
	if err := json.Unmarshal(stored, &have); err != nil {
		return "its " + localizeManifestName + " is unreadable"
	}
	var diffs []string
	if have.Samples != m.Samples {
		diffs = append(diffs, fmt.Sprintf("--samples %d, now %d", have.Samples, m.Samples))
	}
	if have.RunID != m.RunID {
		diffs = append(diffs, fmt.Sprintf("run %q, now %q", have.RunID, m.RunID))
	}
	a, _ := json.Marshal(have.Spec)
	b, _ := json.Marshal(m.Spec)
	if !bytes.Equal(a, b) {
		diffs = append(diffs, "the policy, sampling or limits differ")
	}
	if len(diffs) == 0 {
		return "a different localize.json"
	}
	return strings.Join(diffs, "; ")
}

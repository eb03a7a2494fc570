package coordinator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/coordinator/dataset"
	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/schema"
)

// GoldConfig configures a gold extraction run.
type GoldConfig struct {
	Dataset  string // JSONL or Parquet
	ReposDir string // one repository per dataset repo, named owner__name
	Out      string // gt_location.jsonl to write; "" writes nothing
	Strict   bool   // fail on the first bad dataset row
	// Languages decide each instance's languages (required): its edited
	// files of those are read, each by its own.
	Languages lang.Selection
	// MaxEditFiles: instances editing more source files get null gold (0: no limit).
	MaxEditFiles int
	// ReferenceNulls: null gold where the reference generator fails
	// (gold.Options.ReferenceNulls).
	ReferenceNulls bool
	// WithRequirements appends SWE-bench Pro's requirements and interface
	// to each problem statement (dataset.Options.WithRequirements).
	WithRequirements bool
	// Concurrency bounds parallel extraction; 0 means GOMAXPROCS.
	Concurrency int
	// Progress, when set, is told about each finished instance; it is
	// called from several goroutines.
	Progress func(done, total int)
	Log      zerolog.Logger
}

func (c *GoldConfig) validate() error {
	switch {
	case c.Dataset == "":
		return errors.New("a dataset is required (--dataset)")
	case c.ReposDir == "":
		return errors.New("a repos folder is required (--repos)")
	case c.Languages.Registry().Len() == 0:
		return errors.New("no language to parse the dataset's files with")
	case c.MaxEditFiles < 0:
		return fmt.Errorf("max edit files must be >= 0, got %d", c.MaxEditFiles)
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency must be >= 0, got %d", c.Concurrency)
	}
	if st, err := os.Stat(c.ReposDir); err != nil || !st.IsDir() {
		return fmt.Errorf("repos folder %s does not exist", c.ReposDir)
	}
	return nil
}

// GoldReport is a loaded dataset and its gold.
type GoldReport struct {
	// Instances are the dataset's valid rows, in order; Rows their gold.
	Instances []schema.Instance
	Rows      []gold.Result
	Skipped   []*dataset.RowError
	// Dataset is what was read of the dataset: its counts.
	Dataset *dataset.Result
}

// Golds are the rows' gold, in order, as the metrics take them.
func (r *GoldReport) Golds() []schema.Gold {
	out := make([]schema.Gold, len(r.Rows))
	for i, row := range r.Rows {
		out[i] = row.Gold
	}
	return out
}

// Locations maps each instance with gold (not null) to its locations, as
// jobs are published with.
func (r *GoldReport) Locations() map[string]schema.Locations {
	out := make(map[string]schema.Locations, len(r.Rows))
	for _, row := range r.Rows {
		if row.Gold.FileChanges != nil {
			out[row.Gold.InstanceID] = row.Gold.Locations()
		}
	}
	return out
}

// ConfigError marks a bad configuration (the CLI exits 2 for it).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// RunGold loads the dataset (once: the commands that publish a run take
// its instances from the report), extracts gold for every valid instance
// and writes the rows in dataset order (tmp file, then rename).
func RunGold(ctx context.Context, cfg GoldConfig) (*GoldReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, &ConfigError{err}
	}
	repos := gitrepo.NewSet(cfg.ReposDir)
	defer repos.Close()
	ds, err := dataset.Load(ctx, cfg.Dataset, dataset.Options{Strict: cfg.Strict, Repos: repos, WithRequirements: cfg.WithRequirements, Languages: cfg.Languages})
	if err != nil {
		return nil, err
	}
	ds.Log(cfg.Log)
	workers := cfg.Concurrency
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, len(ds.Instances)))

	results := make([]gold.Result, len(ds.Instances))
	next := make(chan int)
	var finished atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for i := range ds.Instances {
			select {
			case next <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			ex, err := gold.NewExtractor(gold.Options{Languages: cfg.Languages.Registry(), MaxEditFiles: cfg.MaxEditFiles, ReferenceNulls: cfg.ReferenceNulls}, isNotFound)
			if err != nil {
				return err
			}
			defer ex.Close()
			for i := range next {
				inst := ds.Instances[i]
				commit, err := repos.Snapshot(inst.Repo, inst.BaseCommit, inst.BasePatch, inst.InstanceID)
				if err != nil {
					return fmt.Errorf("%s: %w", inst.InstanceID, err)
				}
				snap, err := repos.At(inst.Repo, commit)
				if err != nil {
					return fmt.Errorf("%s: %w", inst.InstanceID, err)
				}
				res, err := ex.Extract(inst, snap)
				if err != nil {
					return fmt.Errorf("%s: %w", inst.InstanceID, err)
				}
				if res.NullReason != "" {
					cfg.Log.Warn().Str("instance", inst.InstanceID).Msg("null gold: " + res.NullReason)
				}
				results[i] = res
				if cfg.Progress != nil {
					cfg.Progress(int(finished.Add(1)), len(results))
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	report := &GoldReport{Instances: ds.Instances, Rows: results, Skipped: ds.Skipped, Dataset: ds}
	if cfg.Out != "" {
		if err := writeGold(cfg.Out, results); err != nil {
			return nil, err
		}
	}
	return report, nil
}

func isNotFound(err error) bool { return errors.Is(err, gitrepo.ErrNotFound) }

func writeGold(path string, rows []gold.Result) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		for _, r := range rows {
			if err := enc.Encode(r.Gold); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

// GoldDiff is one disagreement between extracted and reference gold.
type GoldDiff struct {
	InstanceID string
	Field      string
	Got, Want  []string
}

// CompareGold checks extracted rows against reference rows (a
// gt_location.jsonl, or any JSONL with instance_id and file_changes) on
// files, edited entities and edited modules, per file and in order. It
// returns the instance ids compared and the differences.
func CompareGold(rows []gold.Result, refPath string) (compared []string, diffs []GoldDiff, err error) {
	f, err := os.Open(refPath)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	refRows, err := schema.ReadGold(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", refPath, err)
	}
	ref := make(map[string]schema.Gold, len(refRows))
	for _, g := range refRows {
		ref[g.InstanceID] = g
	}
	for _, r := range rows {
		want, ok := ref[r.Gold.InstanceID]
		if !ok {
			continue
		}
		compared = append(compared, r.Gold.InstanceID)
		got := r.Gold
		check := func(field string, g, w []string) {
			if !slices.Equal(g, w) {
				diffs = append(diffs, GoldDiff{InstanceID: got.InstanceID, Field: field, Got: g, Want: w})
			}
		}
		if (got.FileChanges == nil) != (want.FileChanges == nil) {
			diffs = append(diffs, GoldDiff{InstanceID: got.InstanceID, Field: "file_changes is null",
				Got: []string{fmt.Sprint(got.FileChanges == nil)}, Want: []string{fmt.Sprint(want.FileChanges == nil)}})
			continue
		}
		gl, wl := got.Locations(), want.Locations()
		check("files", gl.Files, wl.Files)
		for i := range min(len(got.FileChanges), len(want.FileChanges)) {
			gc, wc := got.FileChanges[i].Changes, want.FileChanges[i].Changes
			file := want.FileChanges[i].File
			check(file+" edited_entities", gc.EditedEntities, wc.EditedEntities)
			check(file+" edited_modules", gc.EditedModules, wc.EditedModules)
		}
	}
	return compared, diffs, nil
}

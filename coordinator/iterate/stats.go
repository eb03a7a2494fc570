package iterate

import (
	"encoding/json"
	"io"
	"math"
	"path/filepath"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/learner/shard"
)

// ShardStats sums the learner's manifests of one run iteration (dir holds
// a folder per group): groups, rows, trajectories and turns, the turns'
// advantage mean and spread, the mean step weight and the file-level
// discovery–commit gap.
func ShardStats(dir string) (RolloutResult, error) {
	var r RolloutResult
	var advSum, advSq, dcSum, wSum float64
	var wN int
	paths, err := filepath.Glob(filepath.Join(dir, "*", shard.ManifestName))
	if err != nil {
		return r, err
	}
	for _, p := range paths {
		m, err := learner.ReadShardManifest(filepath.Dir(p))
		if err != nil {
			return r, err
		}
		r.Groups++
		r.Rows += m.Rows
		d := m.Diagnostics
		r.Trajectories += d.Trajectories
		r.Steps += d.Steps
		n := float64(d.Steps)
		advSum += d.AdvantageMean * n
		advSq += (d.AdvantageStd*d.AdvantageStd + d.AdvantageMean*d.AdvantageMean) * n
		dcSum += d.DCGapFile * float64(d.Trajectories)
		for i, c := range d.WeightHistogram {
			wSum += (float64(i) + 0.5) * 0.25 * float64(c) // the histogram's bins are 0.25 wide: each counts at its middle
			wN += c
		}
	}
	if r.Steps > 0 {
		r.AdvantageMean = advSum / float64(r.Steps)
		r.AdvantageStd = math.Sqrt(max(0, advSq/float64(r.Steps)-r.AdvantageMean*r.AdvantageMean))
	}
	if r.Trajectories > 0 {
		r.DCGapFile = dcSum / float64(r.Trajectories)
	}
	if wN > 0 {
		r.WeightMean = wSum / float64(wN)
	}
	return r, nil
}

// WriteReport writes the rows as report.jsonl, whole or not at all: a
// reader (or a crash) never sees half of it.
func WriteReport(path string, rows []Row) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	})
}

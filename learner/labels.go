package learner

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/a2farm/a2farm/schema"
)

// turnLabel and trajectoryLabel are the lines of a labels file.
type turnLabel struct {
	InstanceID     string  `json:"instance_id"`
	Sample         int64   `json:"sample"`
	Turn           int64   `json:"turn"`
	ToolName       string  `json:"tool_name"`
	ToolArgs       string  `json:"tool_args"`
	ActionKey      string  `json:"action_key"`
	ProgressFile   float64 `json:"progress_file"`
	ProgressModule float64 `json:"progress_module"`
	ProgressEntity float64 `json:"progress_entity"`
	Reward         float64 `json:"reward"`
	Return         float64 `json:"return"`
	Advantage      float64 `json:"advantage"`
	Weight         float64 `json:"weight"`
}

type trajectoryLabel struct {
	InstanceID string        `json:"instance_id"`
	Sample     int64         `json:"sample"`
	F1File     float64       `json:"f1_file"`
	F1Module   float64       `json:"f1_module"`
	F1Entity   float64       `json:"f1_entity"`
	DCFile     float64       `json:"dc_file"`
	DCModule   float64       `json:"dc_module"`
	DCEntity   float64       `json:"dc_entity"`
	Status     schema.Status `json:"status"`
	Skipped    string        `json:"skipped,omitempty"`
}

// WriteLabels writes one JSON line per labelled turn, then one per
// trajectory (skipped ones included, with the reason).
func WriteLabels(w io.Writer, res *Result) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, lt := range res.Trajectories {
		if lt.Skipped != "" {
			continue
		}
		tr := lt.Trajectory
		// A branch's replayed turns are its parent's: labelled there.
		for t := tr.OwnTurns(); t < len(tr.Turns); t++ {
			turn := tr.Turns[t]
			p := lt.Labels.Progress[t]
			if err := enc.Encode(turnLabel{tr.InstanceID, tr.Sample, turn.Index, turn.ToolName, turn.ToolArgs, turn.ActionKey,
				p[0], p[1], p[2], lt.Labels.Rewards[t], lt.Labels.Returns[t], lt.Advantages[t], lt.Weights[t]}); err != nil {
				return err
			}
		}
	}
	for _, lt := range res.Trajectories {
		tr := lt.Trajectory
		l := trajectoryLabel{InstanceID: tr.InstanceID, Sample: tr.Sample, Status: tr.Status, Skipped: lt.Skipped,
			F1File: lt.Labels.F1[0], F1Module: lt.Labels.F1[1], F1Entity: lt.Labels.F1[2],
			DCFile: lt.Labels.DC[0], DCModule: lt.Labels.DC[1], DCEntity: lt.Labels.DC[2]}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// SweepRow summarises the advantages at one history length.
type SweepRow struct {
	H        int
	Coverage []float64 // share of steps in a non-singleton group, per depth
	Mean     float64
	Std      float64
	// Base holds the same for the base samples alone, when the batch has
	// branches.
	Base *SweepRow
}

// SweepH recomputes the advantages for each history length.
func SweepH(trs []schema.Trajectory, gold map[string]schema.Locations, cfg Config, hs []int) ([]SweepRow, error) {
	var out []SweepRow
	for _, h := range hs {
		c := cfg
		c.Advantage.H = h
		res, err := Process(trs, gold, c)
		if err != nil {
			return nil, err
		}
		d := res.Diagnostics
		row := SweepRow{H: h, Coverage: d.Coverage, Mean: d.AdvantageMean, Std: d.AdvantageStd}
		if b := d.Branches; b != nil {
			row.Base = &SweepRow{H: h, Coverage: b.BaseCoverage, Mean: b.BaseAdvantageMean, Std: b.BaseAdvantageStd}
		}
		out = append(out, row)
	}
	return out, nil
}

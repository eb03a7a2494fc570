package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// TrainManifestName is the record a2farm-train writes beside an adapter.
const TrainManifestName = "train_manifest.json"

// KindTrainer is an adapter folder a2farm-train wrote: its manifest's loss
// curve, no trajectories.
const KindTrainer = "trainer"

// TrainingRun is one trainer run: its loss per optimizer step and what it
// cost.
type TrainingRun struct {
	Label       string `json:"label"`
	Model       string `json:"model"`
	InitAdapter string `json:"init_adapter,omitempty"`
	Sequences   int    `json:"sequences"`
	// LR and Epochs are the run's learning rate and epochs.
	LR                  float64     `json:"lr"`
	Epochs              int         `json:"epochs"`
	Steps               []TrainStep `json:"steps"`
	TokensPerSecond     float64     `json:"tokens_per_second"`
	TrainedOverComputed float64     `json:"trained_over_computed"`
	PeakMemoryBytes     int64       `json:"peak_memory_bytes"`
}

// TrainStep is one optimizer step.
type TrainStep struct {
	Step  int     `json:"step"`
	Epoch int     `json:"epoch"`
	Loss  float64 `json:"loss"`
	LR    float64 `json:"lr"`
}

// trainManifest is the part of train_manifest.json the report reads.
type trainManifest struct {
	Format          string         `json:"format"`
	Model           string         `json:"model"`
	InitAdapter     *string        `json:"init_adapter"`
	Sequences       int            `json:"sequences"`
	Hyperparameters map[string]any `json:"hyperparameters"`
	Steps           []TrainStep    `json:"steps"`
	Tokens          struct {
		TrainedOverComputed float64 `json:"trained_over_computed"`
	} `json:"tokens"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
}

// loadTraining reads an adapter folder's train_manifest.json.
func loadTraining(dir string) (*TrainingRun, error) {
	path := filepath.Join(dir, TrainManifestName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m trainManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: not a trainer manifest: %w", path, err)
	}
	if m.Format != "a2farm-train/1" {
		return nil, fmt.Errorf("%s: trainer manifest format %q, this report reads a2farm-train/1", path, m.Format)
	}
	run := &TrainingRun{Label: filepath.Base(filepath.Clean(dir)), Model: m.Model, Sequences: m.Sequences, Steps: m.Steps,
		TokensPerSecond: m.TokensPerSecond, TrainedOverComputed: m.Tokens.TrainedOverComputed, PeakMemoryBytes: m.PeakMemoryBytes}
	if m.InitAdapter != nil {
		run.InitAdapter = *m.InitAdapter
	}
	if lr, ok := m.Hyperparameters["lr"].(float64); ok {
		run.LR = lr
	}
	if ep, ok := m.Hyperparameters["epochs"].(float64); ok {
		run.Epochs = int(ep)
	}
	return run, nil
}

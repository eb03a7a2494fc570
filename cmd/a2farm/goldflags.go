package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/schema"
)

// withRequirementsUsage explains --with-requirements, which every command
// that plays a dataset shares.
const withRequirementsUsage = "append SWE-bench Pro's requirements and interface to each problem statement; they name the files to change, so this leaks the answer (the paper's agent sees the problem statement alone)"

// goldConfig is how the commands that play or label a dataset extract its
// gold: with the run's --languages, the default limit on edited files and
// the command's log.
func (e *env) goldConfig(datasetPath, reposDir string) (coordinator.GoldConfig, error) {
	sel, err := e.selection()
	if err != nil {
		return coordinator.GoldConfig{}, err
	}
	return coordinator.GoldConfig{Dataset: datasetPath, ReposDir: reposDir, Languages: sel, MaxEditFiles: gold.DefaultMaxEditFiles, Log: e.log}, nil
}

// goldFlags say where labelling commands (replay, report) find gold: a
// gt_location.jsonl file, or a dataset whose patches are extracted.
type goldFlags struct {
	path, dataset, repos string
}

func (g *goldFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&g.path, "gold", "", "gt_location.jsonl")
	f.StringVar(&g.dataset, "dataset", "", "instead of --gold: extract gold from this dataset's patches (needs --repos)")
	f.StringVar(&g.repos, "repos", envOr("A2FARM_REPOS", ""), "repositories for --dataset (env A2FARM_REPOS)")
}

// given reports whether exactly one of --gold and --dataset is set.
func (g *goldFlags) given() bool { return (g.path == "") != (g.dataset == "") }

// load reads the gold file, or extracts gold from the dataset; instances
// with null gold are left out.
func (g *goldFlags) load(ctx context.Context, e *env) (map[string]schema.Locations, error) {
	if err := inputs("gold", g.path, "dataset", g.dataset, "repos", g.repos); err != nil {
		return nil, err
	}
	var golds []schema.Gold
	var err error
	if g.path != "" {
		golds, err = readFile(g.path, schema.ReadGold)
	} else {
		golds, err = extractGold(ctx, e, g.dataset, g.repos)
	}
	if err != nil {
		return nil, err
	}
	out := map[string]schema.Locations{}
	for _, row := range golds {
		if row.FileChanges != nil {
			out[row.InstanceID] = row.Locations()
		}
	}
	return out, nil
}

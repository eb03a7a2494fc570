package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/gold"
)

func newGoldCmd(e *env) *cobra.Command {
	var cfg coordinator.GoldConfig
	var compare string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "gold --dataset FILE --repos DIR [--out gt_location.jsonl]",
		Short: "Extract gold locations from each instance's gold patch",
		Long: `gold reads every edited source file of the instance's languages (--languages: by
default the row's repo_language or language, Python for a row without one) at
the instance's base_commit straight from git, applies the gold patch in memory
and maps the changed lines to the functions,
methods and classes that contain them, exactly as in the published
gt_location.jsonl files (a class-body edit outside every method names the
class; the generator's crash on added/deleted files is fixed). Rows are
written in dataset order in the gt_location.jsonl format.

Which gold to use: the default (the crash fixed) for training and for your
own evaluations — an instance whose patch creates or deletes a source file
still gets its gold. --reference-nulls makes those instances null, exactly
where the reference generator fails, so that eval scores the instance set
the paper scored (its evaluation skips null rows): use it to reproduce
published numbers.

--repos holds one git repository per dataset repo, bare or not, named
owner__name (e.g. psf__requests). --compare checks the result against a
reference file and fails when any instance differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("dataset", cfg.Dataset, "repos", cfg.ReposDir); err != nil {
				return err
			}
			if err := inputs("dataset", cfg.Dataset, "repos", cfg.ReposDir); err != nil {
				return err
			}
			cfg.Log = e.log
			var err error
			if cfg.Languages, err = e.selection(); err != nil {
				return err
			}
			if !quiet {
				var finish func()
				cfg.Progress, finish = e.progress("gold")
				defer finish()
			}
			report, err := coordinator.RunGold(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			printGoldTable(e, report)
			if cfg.Out != "" {
				e.log.Info().Str("out", cfg.Out).Int("rows", len(report.Rows)).Int("skipped", len(report.Skipped)).Msg("gold written")
			}
			if compare == "" {
				return nil
			}
			compared, diffs, err := coordinator.CompareGold(report.Rows, compare)
			if err != nil {
				return err
			}
			for _, d := range diffs {
				fmt.Fprintf(e.stdout, "DIFF %s %s:\n  got  %v\n  want %v\n", d.InstanceID, d.Field, d.Got, d.Want)
			}
			bad := map[string]bool{}
			for _, d := range diffs {
				bad[d.InstanceID] = true
			}
			fmt.Fprintf(e.stdout, "compared %d instances with %s: %d match, %d differ\n",
				len(compared), compare, len(compared)-len(bad), len(bad))
			if len(bad) > 0 {
				return fmt.Errorf("gold differs from %s for %d instances", compare, len(bad))
			}
			if len(compared) == 0 {
				return fmt.Errorf("no instance of the dataset appears in %s", compare)
			}
			return nil
		},
	}
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&cfg.Dataset, "dataset", "", "dataset: SWE-bench-style JSONL or Parquet")
	f.StringVar(&cfg.ReposDir, "repos", envOr("A2FARM_REPOS", ""), "folder of git repositories named owner__name (env A2FARM_REPOS)")
	f.StringVar(&cfg.Out, "out", "", "gt_location.jsonl to write")
	f.BoolVar(&cfg.Strict, "strict", false, "fail on the first bad dataset row instead of skipping it")
	f.IntVar(&cfg.MaxEditFiles, "max-edit-files", gold.DefaultMaxEditFiles, "null gold for instances editing more source files (0: no limit)")
	f.IntVar(&cfg.Concurrency, "concurrency", 0, "parallel extractions (0: one per CPU)")
	f.BoolVar(&cfg.ReferenceNulls, "reference-nulls", false, "null gold where the reference generator fails (a patch that creates or deletes a source file), to score the paper's instance set")
	f.StringVar(&compare, "compare", "", "reference gt_location.jsonl to compare with (exit 1 on any difference)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress output")
	return cmd
}

func printGoldTable(e *env, report *coordinator.GoldReport) {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tFILES\tMODULES\tENTITIES")
	for _, r := range report.Rows {
		if r.Gold.FileChanges == nil {
			fmt.Fprintf(tw, "%s\t(null: %s)\t\t\n", r.Gold.InstanceID, r.NullReason)
			continue
		}
		loc := r.Gold.Locations()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Gold.InstanceID, list(loc.Files), list(loc.Modules), list(loc.Entities))
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "%s; gold for %d of %d instances (%d null)\n", report.Dataset.Summary(), len(report.Rows)-nulls(report.Rows), len(report.Rows), nulls(report.Rows))
}

func nulls(rows []gold.Result) int {
	n := 0
	for _, r := range rows {
		if r.Gold.FileChanges == nil {
			n++
		}
	}
	return n
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "-"
	}
	return strings.Join(ids, ", ")
}

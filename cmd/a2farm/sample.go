package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/sample"
)

func newSampleCmd(e *env) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "sample --out DIR",
		Short: "Write the built-in sample: a git repository of a Python package and a dataset of issues",
		Long: `sample writes DIR/repos/acme__inventory (a bare git repository with a few commits
and one fix commit per issue) and DIR/dataset.jsonl (SWE-bench-style rows whose
patches are the fixes). Use it to try every command without downloading anything.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return usagef("--out is required")
			}
			l, err := sample.Write(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "sample written: %d instances\n  dataset %s\n  repos   %s\n", len(l.Instances), l.Dataset, l.ReposDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "folder to create (must be empty or absent)")
	return cmd
}

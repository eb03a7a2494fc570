package cli

import "github.com/spf13/cobra"

func newSampleCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "sample", Hidden: true, RunE: func(*cobra.Command, []string) error { return nil }}
}

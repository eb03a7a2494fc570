package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/schema"
)

func newExportCmd(e *env) *cobra.Command {
	var in, out string
	cmd := &cobra.Command{
		Use:   "export --in FILE --out FILE.jsonl",
		Short: "Turn a trajectory Arrow file or a shard Parquet file into JSON lines (for jq)",
		Long: `export writes one JSON object per row with every column: a trajectory file gives one
line per turn (each carrying its trajectory's fields, job_id included), a shard file one
line per training example. --out - writes to standard output.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := required("in", in, "out", out); err != nil {
				return err
			}
			if err := inputs("in", in); err != nil {
				return err
			}
			var rows int
			write := func(w io.Writer) error {
				bw := bufio.NewWriter(w)
				n, err := schema.ExportJSONL(in, bw)
				rows = n
				if err != nil {
					return err
				}
				return bw.Flush()
			}
			var err error
			if out == "-" {
				err = write(e.stdout)
			} else {
				err = atomicfile.Write(out, write)
			}
			if err != nil {
				return err
			}
			if out != "-" {
				fmt.Fprintf(e.stdout, "%d rows written to %s\n", rows, out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "trajectory .arrow or shard .parquet file")
	cmd.Flags().StringVar(&out, "out", "", "JSON lines file to write, or - for standard output")
	return cmd
}

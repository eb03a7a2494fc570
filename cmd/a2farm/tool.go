package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/worker/tools"
)

func newToolCmd(e *env) *cobra.Command {
	var sf snapshotFlags
	var cf cacheFlags
	var name, args string
	var asJSON bool
	var problem string
	cmd := &cobra.Command{
		Use:   "tool --repos DIR --repo OWNER/NAME --commit SHA --name TOOL [--args JSON]",
		Short: "Run one agent tool on a snapshot and print its observation and surfaced ids",
		Long: `tool builds the snapshot's indexes and calls one tool the way the agent would,
printing the observation text and then the files, modules and entities it surfaced.
Tools: ` + strings.Join(tools.AllNames(), ", ") + `.`,
		Example: `  a2farm tool --repos .repos --repo psf/requests --commit 22623bd8c2 \
    --name get_entity_contents --args '{"entity_names": ["requests/models.py:PreparedRequest.prepare_body"]}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(tools.AllNames(), name) {
				return usagef("--name %q: want one of %s", name, strings.Join(tools.AllNames(), ", "))
			}
			if !json.Valid([]byte(args)) {
				return usagef("--args is not valid JSON: %s", args)
			}
			repos := gitrepo.NewSet(sf.repos)
			defer repos.Close()
			idx, err := buildIndex(cmd.Context(), e, repos, sf, cf)
			if err != nil {
				return err
			}
			defer idx.Close()
			set, err := tools.New(idx, tools.Options{ProblemStatement: problem})
			if err != nil {
				return err
			}
			res := set.Call(cmd.Context(), name, json.RawMessage(args))
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetEscapeHTML(false)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"observation": res.Observation, "surfaced": res.Surfaced,
					"finish": res.Finish, "answer": res.Answer})
			}
			fmt.Fprintln(e.stdout, res.Observation)
			fmt.Fprintln(e.stdout, "\n-- surfaced")
			fmt.Fprintf(e.stdout, "files:    %s\nmodules:  %s\nentities: %s\n", list(res.Surfaced.Files), list(res.Surfaced.Modules), list(res.Surfaced.Entities))
			return nil
		},
	}
	sf.bind(cmd)
	cf.bind(cmd)
	e.bindLanguages(cmd, false)
	cmd.Flags().StringVar(&name, "name", "", "tool name")
	cmd.Flags().StringVar(&args, "args", "{}", "tool arguments as a JSON object")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	cmd.Flags().StringVar(&problem, "problem", "", "issue text; commits citing its #numbers are hidden from search_commit")
	return cmd
}

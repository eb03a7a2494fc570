package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/summary"
)

func newIndexSummarizeCmd(e *env) *cobra.Command {
	var sf snapshotFlags
	var out, baseURL, model, keyEnv string
	var concurrency, maxChars int
	cmd := &cobra.Command{
		Use:   "summarize --repos DIR --repo OWNER/NAME --commit SHA --out FILE --base-url URL --model NAME",
		Short: "Write {file_path: summary} for a snapshot with an OpenAI-compatible server",
		Long: `summarize asks the server for a two-to-four sentence summary of every non-test
source file and writes them as the JSON object --summaries reads. Requests run
--concurrency at a time; every summary is journaled next to --out as it arrives, so
an interrupted run resumes where it stopped and files whose content is unchanged
(same git blob, any commit) are never summarized twice. The API key is read from
the environment variable named by --api-key-env.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("out", out, "base-url", baseURL, "model", model); err != nil {
				return err
			}
			if err := checkConcurrency(concurrency); err != nil {
				return err
			}
			client, err := llm.New(llm.Config{BaseURL: baseURL, APIKey: os.Getenv(keyEnv)})
			if err != nil {
				return &usageError{err}
			}
			l, err := e.snapshotLanguages()
			if err != nil {
				return err
			}
			repos, snap, err := sf.open()
			if err != nil {
				return err
			}
			defer repos.Close()
			e.noteUnread(snap, l)
			src, err := codegraph.LoadSnapshot(cmd.Context(), l, sf.repo, snap)
			if err != nil {
				return err
			}
			report, finish := e.progress("summaries")
			made, err := summary.GenerateSummaries(cmd.Context(), src,
				&summary.LLMSummarizer{Client: client, Model: model, MaxChars: maxChars},
				summary.SummarizeConfig{Out: out, Concurrency: concurrency, Progress: report})
			finish()
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s written (%d new summaries)\n", out, made)
			return nil
		},
	}
	sf.bind(cmd)
	e.bindLanguages(cmd, false)
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "summaries JSON to write")
	f.StringVar(&baseURL, "base-url", envOr("A2FARM_BASE_URL", ""), "OpenAI-compatible API root, e.g. http://localhost:8000/v1 (env A2FARM_BASE_URL)")
	f.StringVar(&model, "model", envOr("A2FARM_MODEL", ""), "model name (env A2FARM_MODEL)")
	f.StringVar(&keyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the API key")
	f.IntVar(&concurrency, "concurrency", 4, "requests in flight")
	f.IntVar(&maxChars, "max-file-chars", 12000, "characters of each file sent to the model")
	return cmd
}

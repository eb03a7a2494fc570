package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator/dataset"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codesearch"
)

func newIndexSearchEvalCmd(e *env) *cobra.Command {
	var datasetPath, goldPath, reposDir string
	var k int
	cmd := &cobra.Command{
		Use:   "search-eval --dataset FILE --repos DIR [--gold GT.jsonl] [--k 10]",
		Short: "Measure code-chunk retrieval: top-k file recall of each engine with the problem statement as query",
		Long: `search-eval builds the code-chunk index of every instance's snapshot, queries it
with the problem statement, and reports the share of gold files among the files of
the top-k chunks, for textbook BM25 (bm25) and bleve's bm25 scoring (bleve) over the
same tokens. Gold comes from --gold, or from file_changes in the dataset rows.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("dataset", datasetPath, "repos", reposDir); err != nil {
				return err
			}
			if err := inputs("dataset", datasetPath, "repos", reposDir, "gold", goldPath); err != nil {
				return err
			}
			if goldPath == "" {
				goldPath = datasetPath
			}
			golds, err := readGoldFiles(goldPath)
			if err != nil {
				return err
			}
			repos := gitrepo.NewSet(reposDir)
			defer repos.Close()
			sel, err := e.selection()
			if err != nil {
				return err
			}
			ds, err := dataset.Load(cmd.Context(), datasetPath, dataset.Options{Repos: repos, Languages: sel})
			if err != nil {
				return err
			}
			ds.Log(e.log)
			engines := []string{codesearch.EngineBM25, codesearch.EngineBleve}
			sums := map[string]codesearch.RetrievalScore{}
			n := 0
			tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "INSTANCE\tCHUNKS\tGOLD FILES\t%[1]s recall@%[3]d\t%[1]s MRR\t%[2]s recall@%[3]d\t%[2]s MRR\n", engines[0], engines[1], k)
			for _, inst := range ds.Instances {
				gold := golds[inst.InstanceID]
				if len(gold) == 0 {
					continue
				}
				commit, err := repos.Snapshot(inst.Repo, inst.BaseCommit, inst.BasePatch, inst.InstanceID)
				if err != nil {
					return err
				}
				snap, err := repos.At(inst.Repo, commit)
				if err != nil {
					return err
				}
				l, err := e.languages.Select(inst.Languages)
				if err != nil {
					return err
				}
				src, err := codegraph.LoadSnapshot(cmd.Context(), l, inst.Repo, snap)
				if err != nil {
					return err
				}
				parsed, err := codegraph.ParseAll(cmd.Context(), l, src.Files)
				if err != nil {
					return err
				}
				ci := codesearch.BuildChunkIndex(l, src.Files, parsed)
				fmt.Fprintf(tw, "%s\t%d\t%d", inst.InstanceID, len(ci.Chunks), len(gold))
				for _, eng := range engines {
					r, err := ci.ScoreRetrieval(eng, inst.ProblemStatement, gold, k)
					if err != nil {
						return err
					}
					sum := sums[eng]
					sum.Recall += r.Recall
					sum.RR += r.RR
					sums[eng] = sum
					fmt.Fprintf(tw, "\t%.3f\t%.3f", r.Recall, r.RR)
				}
				fmt.Fprintln(tw)
				n++
			}
			if n == 0 {
				if goldPath == datasetPath {
					return usagef("no row of %s carries gold file_changes; pass --gold GT.jsonl (a2farm gold writes one)", datasetPath)
				}
				return usagef("no instance of %s has gold files in %s", datasetPath, goldPath)
			}
			fmt.Fprintf(tw, "MEAN (%d)\t\t", n)
			for _, eng := range engines {
				fmt.Fprintf(tw, "\t%.3f\t%.3f", sums[eng].Recall/float64(n), sums[eng].RR/float64(n))
			}
			fmt.Fprintln(tw)
			return tw.Flush()
		},
	}
	e.bindLanguages(cmd, true)
	f := cmd.Flags()
	f.StringVar(&datasetPath, "dataset", "", "dataset JSONL")
	f.StringVar(&goldPath, "gold", "", "gt_location.jsonl (default: file_changes of the dataset rows)")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "folder of git repositories named owner__name")
	f.IntVar(&k, "k", 10, "chunks retrieved per query")
	return cmd
}

// readGoldFiles maps instance ids to their gold files.
func readGoldFiles(path string) (map[string][]string, error) {
	golds, err := readFile(path, schema.ReadGold)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(golds))
	for _, g := range golds {
		out[g.InstanceID] = g.Locations().Files
	}
	return out, nil
}

package metrics

import (
	"errors"
	"fmt"
	"github.com/a2farm/a2farm/lang"
	"slices"
	"sort"

	"github.com/a2farm/a2farm/schema"
)

// Report holds evaluation results as flat "<level>.<metric>" keys, overall
// and per repository.
type Report struct {
	Overall map[string]float64
	PerRepo map[string]map[string]float64
	// PerLanguage breaks the scores down by the language of each
	// instance's gold files (the first file's language).
	PerLanguage map[string]map[string]float64
	// Instances is the number of gold instances scored; Samples the
	// number of samples per instance averaged over.
	Instances int
	Samples   int
	// Missing counts (instance, sample) pairs without a prediction (scored 0).
	Missing int
}

// EvalOptions tune Evaluate.
type EvalOptions struct {
	// Languages give function-level predictions their canonical ids
	// (Python's lose a trailing initializer) (required).
	Languages *lang.Set
	// OnlyPredicted skips gold instances that have no prediction at all
	// (the reference protocol scores them 0).
	OnlyPredicted bool
}

// metricKeys lists every per-level metric in report order.
var metricKeys = []string{"precision@k", "recall@k", "f1@k", "precision", "recall", "f1",
	"acc@1", "acc@3", "acc@5", "acc@10", "ndcg@k", "map@k"}

// MetricKeys returns the per-level metric names.
func MetricKeys() []string { return slices.Clone(metricKeys) }

// Evaluate scores predictions against gold. Instances with null gold are
// skipped; a level with empty gold is skipped for that instance. With
// several samples, each sample index is scored over all instances and the
// results are averaged.
func Evaluate(preds []schema.LocOutput, golds []schema.Gold, opts EvalOptions) (*Report, error) {
	if opts.Languages.Len() == 0 {
		return nil, errors.New("evaluate: no language")
	}
	bySample := map[int64]map[string]schema.LocOutput{}
	predicted := map[string]bool{}
	for _, p := range preds {
		if p.Sample < 0 {
			return nil, fmt.Errorf("prediction for %s has negative sample %d", p.InstanceID, p.Sample)
		}
		if bySample[p.Sample] == nil {
			bySample[p.Sample] = map[string]schema.LocOutput{}
		}
		bySample[p.Sample][p.InstanceID] = p
		predicted[p.InstanceID] = true
	}
	samples := make([]int64, 0, len(bySample))
	for s := range bySample {
		samples = append(samples, s)
	}
	slices.Sort(samples)
	if len(samples) == 0 {
		samples = []int64{0}
	}
	type acc struct {
		sum map[string]float64
		n   map[string]int
	}
	newAcc := func() *acc { return &acc{map[string]float64{}, map[string]int{}} }
	overall := newAcc()
	perRepo := map[string]*acc{}
	perLang := map[string]*acc{}
	rep := &Report{Samples: len(samples)}
	for _, g := range golds {
		if g.FileChanges == nil || (opts.OnlyPredicted && !predicted[g.InstanceID]) {
			continue
		}
		rep.Instances++
		loc := g.Locations()
		goldBy := [3][]string{loc.Files, loc.Modules, loc.Entities}
		if perRepo[g.Repo] == nil {
			perRepo[g.Repo] = newAcc()
		}
		language := goldLanguage(g, opts.Languages)
		if perLang[language] == nil {
			perLang[language] = newAcc()
		}
		for _, s := range samples {
			p, ok := bySample[s][g.InstanceID]
			if !ok {
				rep.Missing++
			}
			predBy := [3][]string{p.Files, p.Modules, NormalizeFunctions(p.Entities, opts.Languages)}
			for _, level := range Levels {
				gold := goldBy[level]
				if len(gold) == 0 {
					continue
				}
				scores := Score(predBy[level], gold, level)
				for _, a := range []*acc{overall, perRepo[g.Repo], perLang[language]} {
					for k, v := range scores {
						key := level.String() + "." + k
						a.sum[key] += v
						a.n[key]++
					}
				}
			}
		}
	}
	mean := func(a *acc) map[string]float64 {
		out := map[string]float64{}
		for k, v := range a.sum {
			out[k] = v / float64(a.n[k])
		}
		return out
	}
	rep.Overall = mean(overall)
	rep.PerRepo = map[string]map[string]float64{}
	for repo, a := range perRepo {
		rep.PerRepo[repo] = mean(a)
	}
	rep.PerLanguage = map[string]map[string]float64{}
	for language, a := range perLang {
		rep.PerLanguage[language] = mean(a)
	}
	return rep, nil
}

// goldLanguage names the language of an instance by its first gold file
// ("other" when no language reads it).
func goldLanguage(g schema.Gold, langs *lang.Set) string {
	for _, fc := range g.FileChanges {
		if l := langs.Source(fc.File); l != nil {
			return l.Name()
		}
	}
	return "other"
}

// Score computes every per-level metric of one prediction list.
func Score(pred, gold []string, level Level) map[string]float64 {
	k := level.Cutoff()
	atK := AtK(pred, gold, k)
	exact := Exact(pred, gold)
	return map[string]float64{
		"precision@k": atK.P, "recall@k": atK.R, "f1@k": atK.F1,
		"precision": exact.P, "recall": exact.R, "f1": exact.F1,
		"acc@1": AccAtK(pred, gold, 1), "acc@3": AccAtK(pred, gold, 3),
		"acc@5": AccAtK(pred, gold, 5), "acc@10": AccAtK(pred, gold, 10),
		"ndcg@k": NDCGAtK(pred, gold, k), "map@k": MAPAtK(pred, gold, k),
	}
}

// Repos returns the report's repositories, sorted.
func (r *Report) Repos() []string { return sortedKeys(r.PerRepo) }

// Languages lists the languages scored, sorted.
func (r *Report) Languages() []string { return sortedKeys(r.PerLanguage) }

func sortedKeys(m map[string]map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/browsertest"
	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
)

// The fixtures are real runs of the built-in sample: testdata/up is what
// `a2farm up --samples 4` archived (trajectories and shard manifests, whose
// gold the report reads), testdata/localize a `localize --samples 2` run
// scored with testdata/gt_location.jsonl.

func sources(t *testing.T) ([]*Source, Options) {
	t.Helper()
	farm, err := Load(filepath.Join("testdata", "up"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := Load(filepath.Join("testdata", "localize"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("testdata", "gt_location.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := schema.ReadGold(f)
	if err != nil {
		t.Fatal(err)
	}
	gold := map[string]schema.Locations{}
	for _, g := range rows {
		if g.FileChanges != nil {
			gold[g.InstanceID] = g.Locations()
		}
	}
	return []*Source{farm, local}, Options{Title: "fixture", Learner: learner.DefaultConfig(),
		Languages: lang.NewSet(python.Language{}), Gold: gold}
}

func TestLoadKinds(t *testing.T) {
	srcs, _ := sources(t)
	farm, local := srcs[0], srcs[1]
	if farm.Kind != KindFarm || len(farm.Trajectories) != 24 || len(farm.Closed) != 6 || len(farm.Gold) != 6 {
		t.Errorf("up folder: kind %s, %d trajectories, %d closed groups, %d gold rows; want farm, 24, 6, 6",
			farm.Kind, len(farm.Trajectories), len(farm.Closed), len(farm.Gold))
	}
	if local.Kind != KindLocalize || len(local.Trajectories) != 12 || len(local.Gold) != 0 {
		t.Errorf("localize folder: kind %s, %d trajectories, %d gold rows; want localize, 12, 0", local.Kind,
			len(local.Trajectories), len(local.Gold))
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a run folder") {
		t.Errorf("an empty folder: %v, want a 'not a run folder' error", err)
	}
}

// TestBuildGolden checks every number behind the plots.
func TestBuildGolden(t *testing.T) {
	srcs, opts := sources(t)
	r, err := Build(srcs, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.golden.json", append(got, '\n'))
}

// TestBuildAgreesWithTheLearner: the report's pooled numbers are the
// learner's own, and the reward terms add up to the rewards.
func TestBuildAgreesWithTheLearner(t *testing.T) {
	srcs, opts := sources(t)
	r, err := Build(srcs[:1], opts)
	if err != nil {
		t.Fatal(err)
	}
	gold := srcs[0].Gold
	res, err := learner.Process(srcs[0].Trajectories, gold, opts.Learner)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Diagnostics
	if r.Advantage.N != d.Steps || !near(r.Advantage.Mean, d.AdvantageMean) || !near(r.Advantage.Std, d.AdvantageStd) {
		t.Errorf("advantage n %d mean %g std %g, learner %d %g %g", r.Advantage.N, r.Advantage.Mean, r.Advantage.Std,
			d.Steps, d.AdvantageMean, d.AdvantageStd)
	}
	for k := range d.Coverage {
		if !near(r.Coverage[k], d.Coverage[k]) {
			t.Errorf("coverage[%d] = %g, learner %g", k, r.Coverage[k], d.Coverage[k])
		}
	}
	if r.Advantage.Bins.Total() != r.Advantage.N || r.Weights.Bins.Total() != r.Weights.N {
		t.Errorf("histograms hold %d and %d of %d and %d values", r.Advantage.Bins.Total(), r.Weights.Bins.Total(),
			r.Advantage.N, r.Weights.N)
	}
	steps := 0
	for _, turn := range r.Turns {
		steps += turn.Trajectories
		if sum := turn.Discovery + turn.StepCost + turn.Terminal + turn.Commit; !near(sum, turn.Reward) {
			t.Errorf("turn %d: terms add up to %g, mean reward %g", turn.Turn, sum, turn.Reward)
		}
	}
	if steps != d.Steps {
		t.Errorf("turn rows cover %d steps, the learner %d", steps, d.Steps)
	}
	sweep := map[int]SweepPoint{}
	for _, p := range r.Sweep {
		sweep[p.H] = p
	}
	if p := sweep[opts.Learner.Advantage.H]; !near(p.Std, d.AdvantageStd) || len(p.Coverage) != len(d.Coverage) {
		t.Errorf("sweep at the learner's H: %+v, learner std %g coverage %v", p, d.AdvantageStd, d.Coverage)
	}
	if r.Farm == nil || r.Farm.Groups != 6 || r.Farm.GroupClose.N != 6 || len(r.Farm.Rate) == 0 {
		t.Errorf("farm: %+v, want 6 groups with close times and a rate", r.Farm)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestBuildRefusesNothing(t *testing.T) {
	_, opts := sources(t)
	if _, err := Build(nil, opts); err == nil {
		t.Error("no sources: want an error")
	}
	opts.Languages = nil
	srcs, _ := sources(t)
	if _, err := Build(srcs, opts); err == nil {
		t.Error("no language: want an error")
	}
}

// render writes the fixture's page.
func render(t *testing.T) ([]byte, int) {
	t.Helper()
	srcs, opts := sources(t)
	r, err := Build(srcs, opts)
	if err != nil {
		t.Fatal(err)
	}
	figs, err := Figures(r)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range figs {
		n += len(f)
	}
	var buf bytes.Buffer
	if err := Render(&buf, r, time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), n
}

// TestRenderIsSelfContained: every figure is on the page, as inline SVG,
// and nothing is fetched or scripted.
func TestRenderIsSelfContained(t *testing.T) {
	page, figures := render(t)
	for _, want := range []string{"advantage", "weights", "coverage", "sweep-coverage", "sweep-advantage", "reward-terms",
		"returns", "dc-gap", "type-b", "cost-turns", "cost-observation", "cost-wall", "cost-tools", "farm-rate",
		"farm-close", "f1-by-series"} {
		if !bytes.Contains(page, []byte(`<figure id="`+want+`">`)) {
			t.Errorf("figure %s is missing", want)
		}
	}
	if got := bytes.Count(page, []byte("<figure ")); got != figures || bytes.Count(page, []byte("<svg")) != figures {
		t.Errorf("%d figures and %d svg elements on the page, want %d of each", got, bytes.Count(page, []byte("<svg")), figures)
	}
	if m := regexp.MustCompile(`(?i)<script|<link|<img|src=|https?://[^"\s]*\.(js|css)`).Find(page); m != nil {
		t.Errorf("the page fetches or scripts something: %q", m)
	}
}

// TestReportInABrowser opens the page in headless Chromium: every plot
// lays out and draws, and no error occurs.
func TestReportInABrowser(t *testing.T) {
	page, figures := render(t)
	seen := browsertest.Open(t, page)
	if seen.Plots != figures || seen.Drawn != figures || len(seen.Undrawn) > 0 {
		t.Errorf("the browser drew %d of %d plots (want %d); undrawn: %v", seen.Drawn, seen.Plots, figures, seen.Undrawn)
	}
	if len(seen.Errors) > 0 {
		t.Errorf("errors in the browser: %v", seen.Errors)
	}
	for _, want := range []string{"fixture", "Evaluation", "Per repository", "acme/inventory", "Where reward comes from",
		"Discovery–commit gap", "Episode cost", "Farm"} {
		if !strings.Contains(seen.Text, want) {
			t.Errorf("the page's text lacks %q", want)
		}
	}
	if dir := os.Getenv("A2FARM_SCREENSHOTS"); dir != "" {
		browsertest.Screenshot(t, page, filepath.Join(dir, "report.png"), 1280, 2600)
	}
}

// TestDeadLettersAreCountedNotCosted: an infra_error trajectory (what a
// dead-lettered job leaves) counts as a dead letter with its reason, in
// its series' infra errors, and nowhere in the labels or the cost.
func TestDeadLettersAreCountedNotCosted(t *testing.T) {
	srcs, opts := sources(t)
	farm := srcs[0]
	base, err := Build([]*Source{farm}, opts)
	if err != nil {
		t.Fatal(err)
	}
	dead := farm.Trajectories[0]
	farm.Trajectories[0] = schema.Trajectory{JobID: dead.JobID, RunID: dead.RunID, InstanceID: dead.InstanceID,
		Repo: dead.Repo, Sample: dead.Sample, Status: schema.StatusInfraError, Error: "job failed 3 deliveries",
		FinishedAt: dead.FinishedAt}
	r, err := Build([]*Source{farm}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r.Farm.DeadLetters != 1 || r.Farm.DeadReasons["job failed 3 deliveries"] != 1 || r.Series[0].InfraErrors != 1 {
		t.Errorf("farm %+v, series %+v: want one dead letter with its reason", r.Farm, r.Series[0])
	}
	if r.Series[0].Labeled != base.Series[0].Labeled-1 || r.Cost.Turns.N != base.Cost.Turns.N-1 {
		t.Errorf("labelled %d, costed %d; want one fewer than %d, %d", r.Series[0].Labeled, r.Cost.Turns.N,
			base.Series[0].Labeled, base.Cost.Turns.N)
	}
}

// TestBuildWithBranchesAgreesWithTheLearner: testdata/branches is a
// `localize --samples 2 --branches 1 --fork-at 1,2` run of the sample. The
// report counts a branch's replayed turns once (in the parent), as the
// learner does, and compares the base samples alone with base + branches
// with the learner's numbers.
func TestBuildWithBranchesAgreesWithTheLearner(t *testing.T) {
	_, opts := sources(t)
	src, err := Load(filepath.Join("testdata", "branches"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build([]*Source{src}, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := learner.Process(src.Trajectories, opts.Gold, opts.Learner)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Diagnostics
	var base []schema.Trajectory
	replayed := 0
	for _, tr := range src.Trajectories {
		if !tr.Fork.IsBranch() {
			base = append(base, tr)
		}
		replayed += tr.OwnTurns()
	}
	alone, err := learner.Process(base, opts.Gold, opts.Learner)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Branches
	switch {
	case replayed == 0 || d.Branches == nil || b == nil:
		t.Fatalf("the fixture has no branches: %d replayed turns, learner %+v, report %+v", replayed, d.Branches, b)
	case r.Advantage.N != d.Steps || r.Weights.N != d.Steps || !near(r.Advantage.Std, d.AdvantageStd):
		t.Errorf("advantages of %d steps (std %g), weights of %d; the learner counts %d (std %g)",
			r.Advantage.N, r.Advantage.Std, r.Weights.N, d.Steps, d.AdvantageStd)
	case b.Branches != d.Branches.Branches || b.BaseSteps != alone.Diagnostics.Steps || b.BaseSteps+b.BranchSteps != d.Steps:
		t.Errorf("report branches %+v; learner %+v, base alone %d steps", b, d.Branches, alone.Diagnostics.Steps)
	case !near(b.BaseStd, alone.Diagnostics.AdvantageStd) || !near(b.Std, d.AdvantageStd):
		t.Errorf("advantage std base %g with %g; learner %g and %g", b.BaseStd, b.Std, alone.Diagnostics.AdvantageStd, d.AdvantageStd)
	}
	for k := range alone.Diagnostics.Coverage {
		if !near(b.BaseCoverage[k], alone.Diagnostics.Coverage[k]) || !near(r.Coverage[k], d.Coverage[k]) {
			t.Errorf("coverage[%d]: base %g with %g; learner %g and %g", k, b.BaseCoverage[k], r.Coverage[k],
				alone.Diagnostics.Coverage[k], d.Coverage[k])
		}
	}
	steps := 0
	for _, turn := range r.Turns {
		steps += turn.Trajectories
	}
	if steps != d.Steps {
		t.Errorf("turn rows cover %d steps, the learner %d", steps, d.Steps)
	}
	// The policy is evaluated on its base samples: the same as without
	// the branches.
	baseOnly := *src
	baseOnly.Trajectories = base
	rb, err := Build([]*Source{&baseOnly}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Eval, rb.Eval) || len(r.Eval) == 0 || !reflect.DeepEqual(r.Commit, rb.Commit) || !reflect.DeepEqual(r.Cost, rb.Cost) {
		t.Errorf("the evaluation, commit gaps or episode costs count branches:\n with %v %v %v\n base %v %v %v",
			r.Eval, r.Commit, r.Cost, rb.Eval, rb.Commit, rb.Cost)
	}
	var page bytes.Buffer
	if err := Render(&page, r, time.Now()); err != nil || !strings.Contains(page.String(), `id="branches"`) {
		t.Errorf("the page lacks the branches table (%v)", err)
	}
}

// TestPerLanguageRows: a series whose instances are in two languages gets
// a row per language and level, each from its own instances; a series in
// one language gets none (the fixture's golden report has no such rows).
func TestPerLanguageRows(t *testing.T) {
	srcs, opts := sources(t)
	local := srcs[1]
	opts.Languages = lang.NewSet(python.Language{}, golang.Language{})
	gold := map[string]schema.Locations{}
	var goInstance string
	for id, loc := range opts.Gold {
		gold[id] = loc
		if goInstance == "" || id < goInstance {
			goInstance = id
		}
	}
	gold[goInstance] = schema.Locations{Files: []string{"cmd/tool/main.go"}} // no prediction names it
	opts.Gold = gold
	r, err := Build([]*Source{local}, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]float64{}
	for _, row := range r.PerLanguage {
		rows[row.Language+"/"+row.Level] = row.Metrics["recall@k"]
	}
	if _, ok := rows["python/file"]; !ok || len(rows) != 6 {
		t.Fatalf("per-language rows %v; want go and python at three levels", rows)
	}
	if rows["go/file"] != 0 {
		t.Errorf("go file recall@k = %v, want 0 (no prediction names a .go file)", rows["go/file"])
	}
	var page bytes.Buffer
	if err := Render(&page, r, time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page.Bytes(), []byte("<h3>Per language</h3>")) {
		t.Error("the page has no per-language table")
	}
}

// TestTrainerFolderShowsItsLossCurve: testdata/adapter holds the
// train_manifest.json of a real a2farm-train run (paths shortened). Alone it
// gives a training section only; beside runs it adds one.
func TestTrainerFolderShowsItsLossCurve(t *testing.T) {
	adapter, err := Load(filepath.Join("testdata", "adapter"))
	if err != nil {
		t.Fatal(err)
	}
	if adapter.Kind != KindTrainer || adapter.Training == nil || len(adapter.Training.Steps) != 24 {
		t.Fatalf("adapter folder: kind %s, training %+v; want trainer with 24 steps", adapter.Kind, adapter.Training)
	}
	if first, last := adapter.Training.Steps[0].Loss, adapter.Training.Steps[23].Loss; !(last < first) {
		t.Errorf("loss %g -> %g: the fixture's run lowered it", first, last)
	}
	srcs, opts := sources(t)
	for _, tc := range []struct {
		name    string
		sources []*Source
		runs    bool
	}{{"alone", []*Source{adapter}, false}, {"beside runs", append(srcs, adapter), true}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Build(tc.sources, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Training) != 1 || (len(r.Series) > 0) != tc.runs {
				t.Fatalf("%d training runs, %d series", len(r.Training), len(r.Series))
			}
			var page bytes.Buffer
			if err := Render(&page, r, time.Unix(0, 0)); err != nil {
				t.Fatal(err)
			}
			html := page.String()
			for _, want := range []string{`id="training"`, `<figure id="train-loss"><svg`, "<td>adapter</td>", "<td>24</td>"} {
				if !strings.Contains(html, want) {
					t.Errorf("page lacks %q", want)
				}
			}
			if strings.Contains(html, `id="eval"`) != tc.runs {
				t.Errorf("evaluation section present = %v, want %v", !tc.runs, tc.runs)
			}
		})
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, TrainManifestName), []byte(`{"format":"other/9"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "a2farm-train/1") {
		t.Errorf("a manifest of another format: %v", err)
	}
}

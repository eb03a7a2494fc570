package iterate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/gold"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/policy"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// The loop's steps against a real farm: an embedded JetStream server, a
// worker and a learner, playing the built-in sample with the built-in
// policy. The driver's order and record are iterate_test.go's; the command
// end to end, with replicas serving adapters, is cmd/a2farm's.

var languages = lang.NewSet(python.Language{})

// farmFixture is a running farm and the steps of a run against it.
type farmFixture struct {
	farm     *Farm
	cfg      FarmConfig
	messages *lockedWriter
	player   *localizer
}

func newFarmFixture(t *testing.T) *farmFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	_, js := natstest.New(t)
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, err := sample.Write(filepath.Join(dir, "sample"))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := lang.ParseSelection(languages, "")
	if err != nil {
		t.Fatal(err)
	}
	goldCfg := coordinator.GoldConfig{Dataset: l.Dataset, ReposDir: l.ReposDir, Languages: sel, MaxEditFiles: gold.DefaultMaxEditFiles, Log: zerolog.Nop()}
	report, err := coordinator.RunGold(ctx, goldCfg)
	if err != nil {
		t.Fatal(err)
	}
	policies, err := policy.NewRegistry(policy.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	index := repoindex.BuildOptions{Languages: languages}
	repos := gitrepo.NewSet(l.ReposDir)
	learnerOut := filepath.Join(dir, "learner")
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = worker.Run(ctx, worker.Config{Bus: b, Repos: repos, Policies: policies, Index: index, Concurrency: 4, WorkerID: "w", Log: zerolog.Nop()})
	}()
	go func() {
		defer wg.Done()
		_ = learner.Serve(ctx, learner.ServiceConfig{Bus: b, Out: learnerOut, Learner: learner.DefaultConfig(), Log: zerolog.Nop()})
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		repos.Close()
	})
	messages := &lockedWriter{b: &strings.Builder{}}
	player := &localizer{policies: policies, index: index}
	cfg := FarmConfig{Run: "r", Out: filepath.Join(dir, "iterate"), Spec: schema.RunSpec{Policy: schema.Policy{Kind: schema.PolicyHeuristic}},
		Gold: report, Dataset: l.Dataset, Repos: l.ReposDir, Samples: 2, Bus: b, Shards: filepath.Join(learnerOut, "shards"),
		ShardTimeout: time.Minute, Learn: learner.DefaultConfig(), Player: player, Languages: languages, Messages: messages,
		Trainer: TrainerConfig{Command: "exit 3 {out}", Model: "base", Grace: time.Second},
		Eval: Evaluation{Repos: l.ReposDir, Gold: func(ctx context.Context) (*coordinator.GoldReport, error) {
			return coordinator.RunGold(ctx, goldCfg)
		}}}
	f, err := NewFarm(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &farmFixture{farm: f, cfg: cfg, messages: messages, player: player}
}

// localizer plays in the test's process through the worker, as the command
// does.
type localizer struct {
	policies *policy.Registry
	index    repoindex.BuildOptions
	mu       sync.Mutex
	plays    []Play
}

func (l *localizer) Play(ctx context.Context, p Play) ([]schema.Trajectory, error) {
	l.mu.Lock()
	l.plays = append(l.plays, p)
	l.mu.Unlock()
	repos := gitrepo.NewSet(p.Repos)
	defer repos.Close()
	_, statErr := os.Stat(p.Out)
	res, err := worker.Localize(ctx, worker.LocalizeConfig{Instances: p.Instances, Repos: repos, Spec: p.Spec, Policies: l.policies,
		Index: l.index, Samples: p.Samples, FirstSample: p.FirstSample, Concurrency: 4, RunID: p.RunID, Out: p.Out, Resume: statErr == nil, Log: zerolog.Nop()})
	return res.Trajectories, err
}

// TestARolloutIsPublishedAnsweredAndSharded: iteration 1 is published to
// the farm, every job is answered, the learner shards every group, and the
// step's figures are the shards' manifests summed.
func TestARolloutIsPublishedAnsweredAndSharded(t *testing.T) {
	f := newFarmFixture(t)
	ctx := context.Background()
	r, err := f.farm.Rollout(ctx, 1, Base)
	if err != nil {
		t.Fatal(err)
	}
	instances := len(f.cfg.Gold.Instances)
	if r.Jobs != instances*2 || r.Trajectories != instances*2 || r.Groups != instances {
		t.Errorf("rollout %+v, want %d jobs and trajectories in %d groups", r, instances*2, instances)
	}
	rows := 0
	manifests, _ := filepath.Glob(filepath.Join(f.cfg.Shards, "r", "1", "*"))
	for _, dir := range manifests {
		m, err := learner.ReadShardManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		rows += m.Rows
	}
	if rows == 0 || r.Rows != rows {
		t.Errorf("rollout rows %d, the shards hold %d", r.Rows, rows)
	}
	if r.Model != "" || r.WeightMean <= 0 {
		t.Errorf("rollout %+v: want the base model's (no adapter name) and a mean weight", r)
	}
	// Rolled out again (a resumed step): nothing is published, the figures
	// are the same.
	again, err := f.farm.Rollout(ctx, 1, Base)
	if err != nil || again.Rows != r.Rows || again.Groups != r.Groups {
		t.Errorf("the step again: %+v, %v; want %+v", again, err, r)
	}
}

// TestTheWarmupPlaysUnsolvedInstancesAgain: the teacher (the built-in
// policy) plays every instance once, then only those no trajectory solved
// and whose gold names every level, and its solved instances become SFT
// shards with weight 1.
func TestTheWarmupPlaysUnsolvedInstancesAgain(t *testing.T) {
	f := newFarmFixture(t)
	f.farm.cfg.Teacher = Teacher{Model: TeacherHeuristic, Tries: 3}
	r, err := f.farm.Rollout(context.Background(), 0, Base)
	if err != nil {
		t.Fatal(err)
	}
	plays := f.player.plays
	if len(plays) != r.Tries || len(plays[0].Instances) != len(f.cfg.Gold.Instances) {
		t.Fatalf("%d plays (first of %d instances), result %+v: want one per try, the first of every instance", len(plays), len(plays[0].Instances), r)
	}
	gold := f.cfg.Gold.Locations()
	for i, p := range plays[1:] {
		if p.FirstSample != int64(i+1) {
			t.Errorf("try %d plays sample %d: want a new sample per try", i+2, p.FirstSample)
		}
		for _, in := range p.Instances {
			if !everyLevel(gold[in.InstanceID]) {
				t.Errorf("try %d plays %s again: its gold lacks a level, no answer can match it", i+2, in.InstanceID)
			}
		}
	}
	m, err := learner.ReadShardManifest(WarmupShards(f.cfg.Out))
	if err != nil {
		t.Fatal(err)
	}
	if r.Solved == 0 || r.Rows != m.Rows || r.Instances != len(f.cfg.Gold.Instances) || r.WeightMean != 1 {
		t.Errorf("warm-up %+v, shards of %d rows: want solved instances, their rows", r, m.Rows)
	}
	if !f.messages.has("warm-up: after try 1, ") {
		t.Errorf("no progress line for the tries:\n%s", f.messages.b.String())
	}
}

// TestAnEvaluationPlaysGreedilyAndScores: the held-out set is played with
// temperature 0, one sample and no branches, into eval/it<k>, and scored;
// played again (a resumed step) it plays nothing new.
func TestAnEvaluationPlaysGreedilyAndScores(t *testing.T) {
	f := newFarmFixture(t)
	f.farm.cfg.Spec.Sampling = schema.Sampling{Temperature: 0.8, TopP: 0.9}
	f.farm.cfg.Spec.Branching = schema.Branching{Branches: 2, ForkAt: []int64{1}}
	ctx := context.Background()
	r, ok, err := f.farm.Evaluate(ctx, 1, Base)
	if err != nil || !ok {
		t.Fatalf("evaluate: %v, %v", ok, err)
	}
	p := f.player.plays[0]
	if p.Spec.Sampling.Temperature != 0 || p.Spec.Sampling.TopP != 0 || p.Spec.Branching.On() || p.Samples != 1 ||
		p.Out != filepath.Join(f.cfg.Out, "eval", "it1") {
		t.Errorf("the evaluation played %+v: want greedy, one branchless sample, into eval/it1", p)
	}
	if r.Instances != len(f.cfg.Gold.Instances) || r.F1["file"] <= 0 || r.F1["file"] > 1 || r.Recall["function"] < 0 {
		t.Errorf("evaluation %+v", r)
	}
	trs, _ := filepath.Glob(filepath.Join(p.Out, "trajectories", "*"))
	again, _, err := f.farm.Evaluate(ctx, 1, Base)
	trsAgain, _ := filepath.Glob(filepath.Join(p.Out, "trajectories", "*"))
	if err != nil || again.F1["file"] != r.F1["file"] || len(trsAgain) != len(trs) {
		t.Errorf("evaluated again: %+v, %v; %d trajectory files, had %d", again, err, len(trsAgain), len(trs))
	}

	f.farm.cfg.Eval.Gold = nil
	if _, ok, err := f.farm.Evaluate(ctx, 2, Base); ok || err != nil {
		t.Errorf("without a held-out set: %v, %v; want no evaluation", ok, err)
	}
}

// TestAnAdapterIsInstalledOnlyWhole: the trainer writes beside the final
// folder, which appears only once the trainer exited 0 with an adapter
// there; what another trainer left half-written aside is trained again,
// a2farm-train's finished adapter aside (manifest written last) is
// installed without training, and a checkpoint aside is resumed.
func TestAnAdapterIsInstalledOnlyWhole(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "adapters", "it1")
	partial := final + ".partial"
	var lines []string
	train := func(template string) (TrainResult, error) {
		return Train(context.Background(), final, template, TrainerVars{Model: "m", Shards: "s", Run: "r", Iteration: 1}, time.Second,
			func(line string) { lines = append(lines, line) }, &bytes.Buffer{})
	}
	half := "mkdir -p {out} && touch {out}/adapter_config.json && exit 3"
	if _, err := train(half); err == nil || !strings.Contains(err.Error(), "the trainer exited 3") {
		t.Fatalf("a failing trainer: %v", err)
	}
	if _, err := os.Stat(final); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a failed trainer %s: %v, want nothing", final, err)
	}
	// The failed trainer's folder aside looks like an adapter; it is not
	// taken for one: the next trainer starts from nothing.
	if IsAdapter(partial) != nil {
		t.Fatalf("the failed trainer left no half-written adapter aside")
	}
	if _, err := train("true {out}"); err == nil || !strings.Contains(err.Error(), "holds no adapter") {
		t.Errorf("a trainer that exits 0 with nothing, after a half-written adapter: %v", err)
	}

	if err := os.MkdirAll(partial+".checkpoint", 0o755); err != nil {
		t.Fatal(err)
	}
	lines = nil
	r, err := train("mkdir -p {out} && touch {out}/adapter_config.json && echo {resume} > {out}/resumed")
	if err != nil || r.Adapter != final || IsAdapter(final) != nil {
		t.Fatalf("a trainer that finishes: %+v, %v", r, err)
	}
	if data, _ := os.ReadFile(filepath.Join(final, "resumed")); strings.TrimSpace(string(data)) != "--resume" {
		t.Errorf("with a checkpoint aside the trainer got %q, want --resume", data)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], partial) {
		t.Errorf("announced %q, want the command writing aside", lines)
	}

	// Installed: the step again runs nothing and reads the manifest.
	manifest := `{"steps": [{"loss": 2.0, "seconds": 1.0}, {"loss": 1.0, "seconds": 3.0}], "tokens_per_second": 50}`
	if err := os.WriteFile(filepath.Join(final, TrainManifestName), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	lines = nil
	r, err = train("exit 9 {out}")
	if err != nil || len(lines) != 0 || r != (TrainResult{Adapter: final, Steps: 2, LossFirst: 2, LossLast: 1, SecondsPerStep: 2, TokensPerSecond: 50}) {
		t.Errorf("an installed adapter: %+v, %v, ran %q", r, err, lines)
	}

	// a2farm-train finished aside but the rename did not happen: installed
	// as it is.
	if err := os.Rename(final, partial); err != nil {
		t.Fatal(err)
	}
	r, err = train("exit 9 {out}")
	if err != nil || len(lines) != 0 || r.Steps != 2 || IsAdapter(final) != nil {
		t.Errorf("a finished adapter aside: %+v, %v, ran %q", r, err, lines)
	}
}

// TestARolloutEndsWhenAnEmbeddedRoleFails: a worker or the learner of the
// embedded farm that stops with an error ends the rollout step at once with
// that error, instead of leaving it to wait out the shard timeout for
// shards nobody will write; a Ctrl-C stays a Ctrl-C, and a running farm's
// roles (no channel) are not watched.
func TestARolloutEndsWhenAnEmbeddedRoleFails(t *testing.T) {
	failed := make(chan error, 1)
	f := &Farm{cfg: FarmConfig{FarmFailed: failed}}
	ctx, stop := f.whileTheFarmRuns(context.Background())
	failed <- errors.New("learner consumer: no responders")
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the step's context did not end when a role failed")
	}
	if err := stop(ctx.Err()); err == nil || err.Error() != "the embedded farm stopped: learner consumer: no responders" {
		t.Errorf("step error %v, want the role's", err)
	}

	parent, cancel := context.WithCancel(context.Background())
	ctx, stop = f.whileTheFarmRuns(parent)
	cancel()
	<-ctx.Done()
	if err := stop(ctx.Err()); !errors.Is(err, context.Canceled) {
		t.Errorf("after Ctrl-C: %v, want the context's error", err)
	}

	ctx, stop = (&Farm{}).whileTheFarmRuns(context.Background())
	if ctx.Err() != nil || stop(nil) != nil {
		t.Error("without an embedded farm the step runs as it is")
	}
}

// TestRoundsPlayTheTrainingSetInSlicesOnTheFarm: with a round size, each
// round publishes its slice of the training set (a pass covers it once),
// rounds play beside the training the bound allows, each round's shards
// hold only its instances, and a version is evaluated after the pass.
func TestRoundsPlayTheTrainingSetInSlicesOnTheFarm(t *testing.T) {
	f := newFarmFixture(t)
	f.cfg.RoundSize = 2
	f.cfg.Trainer.Command = `mkdir -p {out} && touch {out}/adapter_config.json`
	farm, err := NewFarm(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := f.cfg.Gold.Instances
	perPass := RoundsPerPass(len(all), 2)
	if perPass != (len(all)+1)/2 || perPass < 2 {
		t.Fatalf("%d instances in rounds of 2: %d rounds per pass", len(all), perPass)
	}
	rows, stats, err := RunRounds(context.Background(), RoundsConfig{Dir: f.cfg.Out, Rounds: perPass, PerPass: perPass,
		MaxStaleness: 1, Plan: 1, Steps: farm})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, row := range rows {
		r := i + 1
		want := all[(r-1)*2 : min(r*2, len(all))]
		groups, _ := filepath.Glob(filepath.Join(f.cfg.Shards, "r", fmt.Sprint(r), "*"))
		if row.Rollout == nil || row.Rollout.Jobs != 2*len(want) || row.Rollout.Groups != len(want) || len(groups) != len(want) {
			t.Errorf("round %d: %+v, %d group folders; want %d instances", r, row.Rollout, len(groups), len(want))
		}
		for _, g := range groups {
			seen[filepath.Base(g)]++
		}
		if row.Staleness == nil || *row.Staleness > 1 || row.Train == nil || row.Train.Adapter != AdapterDir(f.cfg.Out, r) {
			t.Errorf("round %d: staleness %v, trained %+v", r, row.Staleness, row.Train)
		}
	}
	for _, in := range all {
		n := 0
		for g, c := range seen {
			if strings.Contains(g, in.InstanceID) {
				n += c
			}
		}
		if n != 1 {
			t.Errorf("instance %s has %d groups in the pass, want 1", in.InstanceID, n)
		}
	}
	if last := rows[len(rows)-1]; last.Eval == nil || last.Eval.Instances != len(all) {
		t.Errorf("the pass's adapter was not evaluated: %+v", last.Eval)
	}
	if stats.RowsTrained() == 0 || stats.MaxSeen() > 1 {
		t.Errorf("stats %+v", stats)
	}
}

package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/lang/typescript"
	"github.com/a2farm/a2farm/worker/repoindex"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/policy"
)

// TestFarmWorkersRunEveryJobOnce publishes issue × N jobs, runs three
// workers against one embedded JetStream server and checks that every job
// yields exactly one trajectory and the queue drains.
func TestFarmWorkersRunEveryJobOnce(t *testing.T) {
	_, js := natstest.New(t)
	ctx := context.Background()
	cfg := bus.DefaultConfig()
	cfg.AckWait, cfg.MaxDeliver = time.Second, 2 // the ghost job waits one redelivery for a worker that has it
	b, err := bus.Open(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	const samples = 4
	want := map[string]bool{}
	for _, inst := range l.Instances {
		for s := range int64(samples) {
			job := schema.Job{JobID: schema.JobID("run1", 0, inst.InstanceID, s), RunID: "run1", InstanceID: inst.InstanceID,
				Repo: inst.Repo, BaseCommit: inst.BaseCommit, ProblemStatement: inst.ProblemStatement, Sample: s, Sampling: schema.Sampling{Seed: schema.SampleSeed(3, s)},
				Policy: schema.Policy{Kind: "heuristic"}}
			want[job.JobID] = true
			for range 2 { // a restarted coordinator republishing is harmless
				if err := b.PublishJob(ctx, job); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// A job for a repository nobody has waits for a worker that has it,
	// then is given up with the reason on its last delivery.
	if err := b.PublishJob(ctx, schema.Job{JobID: "run1/0/ghost/0", RunID: "run1", InstanceID: "ghost", Repo: "no/such", BaseCommit: "abc1234",
		Policy: schema.Policy{Kind: schema.PolicyHeuristic}}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]string{}
	opened := map[string]int{} // indexes opened by the three workers, by where they came from
	for i := range 3 {
		repos := gitrepo.NewSet(l.ReposDir)
		defer repos.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := Run(runCtx, Config{Bus: b, Repos: repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: builtinPolicies(t), Concurrency: 4,
				WorkerID: string(rune('a' + i)), Log: zerolog.Nop(),
				OnJobSettled: func(id, outcome string) { mu.Lock(); outcomes[id] = outcome; mu.Unlock() },
				OnIndex: func(_ time.Duration, from string, err error) {
					if err == nil {
						mu.Lock()
						opened[from]++
						mu.Unlock()
					}
				}})
			if err != nil {
				t.Error(err)
			}
		}()
	}

	cons, err := js.OrderedConsumer(ctx, bus.TrajStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < len(want)+1 && time.Now().Before(deadline) {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			continue
		}
		tr, err := b.DecodeTrajectory(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		got[tr.JobID]++
		if tr.JobID == "run1/0/ghost/0" {
			if tr.Status != schema.StatusInfraError || !strings.Contains(tr.Error, "no live worker has snapshot no/such@abc1234") {
				t.Errorf("the ghost job's trajectory: %s %q", tr.Status, tr.Error)
			}
			continue
		}
		if tr.Status != schema.StatusOK || tr.WorkerID == "" || len(tr.Turns) == 0 {
			t.Errorf("trajectory %s: status %s worker %q turns %d", tr.JobID, tr.Status, tr.WorkerID, len(tr.Turns))
		}
	}
	if keys, err := b.Workers.Keys(ctx); err != nil || len(keys) != 3 {
		t.Errorf("live workers = %v, %v; want 3 heartbeats", keys, err)
	}
	stop()
	wg.Wait()

	for id := range want {
		if got[id] != 1 {
			t.Errorf("job %s produced %d trajectories", id, got[id])
		}
	}
	if info, err := b.Traj.Info(ctx); err != nil || info.State.Msgs != uint64(len(want)+1) {
		t.Errorf("trajectory log holds %v messages, want %d (%v)", info.State.Msgs, len(want)+1, err)
	}
	pending, inFlight, err := b.QueueDepth(ctx)
	if err != nil || pending != 0 || inFlight != 0 {
		t.Errorf("queue depth %d+%d after the run (%v)", pending, inFlight, err)
	}
	if outcomes["run1/0/ghost/0"] != "ack" || got["run1/0/ghost/0"] != 1 {
		t.Errorf("the unknown repository's job ended with %q and %d trajectories, want one given-up trajectory",
			outcomes["run1/0/ghost/0"], got["run1/0/ghost/0"])
	}
	if dead, err := b.DeadLetters(ctx, "run1"); err != nil || len(dead) != 1 || !strings.Contains(dead[0].Reason, "no/such@abc1234") {
		t.Errorf("dead letters %+v (%v), want the ghost job with its reason", dead, err)
	}
	if keys, _ := b.Workers.Keys(ctx); len(keys) != 0 {
		t.Errorf("stopped workers still heartbeat: %v", keys)
	}
	// Each snapshot is built once across the three workers (no shared
	// cache folder between them); the others fetch it from the farm.
	snapshots := map[string]bool{}
	for _, inst := range l.Instances {
		snapshots[inst.Repo+"@"+inst.BaseCommit] = true
	}
	if opened[repoindex.SourceBuilt] != len(snapshots) || opened[repoindex.SourceCache] != 0 {
		t.Errorf("indexes opened: %v; want %d built (one per snapshot), the rest fetched from the farm", opened, len(snapshots))
	}
}

// TestIdleIndexesAreKeptUpToTheLimit: an index no episode uses stays open
// for the next job on its snapshot, the least recently released one is
// closed beyond KeepIndexes, and a failed build is not kept.
func TestIdleIndexesAreKeptUpToTheLimit(t *testing.T) {
	reposDir := t.TempDir()
	r, err := repogen.Init(filepath.Join(reposDir, "o__r"))
	if err != nil {
		t.Fatal(err)
	}
	var snapshots [][2]string
	parent := ""
	for i := range 3 {
		if parent, err = r.Commit(parent, repogen.Change{Message: fmt.Sprint("commit ", i),
			Write: map[string]string{fmt.Sprintf("pkg/m%d.py", i): fmt.Sprintf("def f%d():\n    return %d\n", i, i)}}); err != nil {
			t.Fatal(err)
		}
		snapshots = append(snapshots, [2]string{"o/r", parent})
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		keep     int
		wantOpen int
	}{
		{"keep two", 2, 2},
		{"keep none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Bus: &bus.Bus{}, Repos: repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: builtinPolicies(t), KeepIndexes: tc.keep}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			w := &farmWorker{cfg: cfg, indexes: map[string]*indexEntry{}}
			defer w.closeIndexes()
			first, release, err := w.index(ctx, snapshots[0][0], snapshots[0][1], cfg.Index)
			if err != nil {
				t.Fatal(err)
			}
			// Two episodes on one snapshot share the index.
			again, releaseAgain, err := w.index(ctx, snapshots[0][0], snapshots[0][1], cfg.Index)
			if err != nil || again != first {
				t.Fatalf("second user got another index (%v)", err)
			}
			release()
			releaseAgain()
			reused, release, err := w.index(ctx, snapshots[0][0], snapshots[0][1], cfg.Index)
			if err != nil {
				t.Fatal(err)
			}
			if (reused == first) != (tc.keep > 0) {
				t.Errorf("index reused after release = %v; keep = %d", reused == first, tc.keep)
			}
			release()
			for _, s := range snapshots[1:3] {
				_, release, err := w.index(ctx, s[0], s[1], cfg.Index)
				if err != nil {
					t.Fatal(err)
				}
				release()
			}
			if len(w.indexes) != tc.wantOpen || len(w.idle) != tc.wantOpen {
				t.Fatalf("%d indexes open, %d idle; want %d", len(w.indexes), len(w.idle), tc.wantOpen)
			}
			if _, ok := w.indexes[indexKey(snapshots[0][0], snapshots[0][1], cfg.Index.Languages)]; ok {
				t.Error("the least recently used index is still open")
			}
			if _, _, err := w.index(ctx, "no/such", "abc1234", cfg.Index); err == nil {
				t.Fatal("an unknown snapshot built an index")
			}
			if _, ok := w.indexes[indexKey("no/such", "abc1234", cfg.Index.Languages)]; ok {
				t.Error("a failed build is kept")
			}
		})
	}
}

// TestOpenIndexesStayWithinTheirMemoryBudget opens more snapshots than fit
// in IndexMemory, one episode at a time: whenever an index is released the
// open ones fit in the budget (the least recently used are closed first),
// every report says so, and an index in use is never closed.
func TestOpenIndexesStayWithinTheirMemoryBudget(t *testing.T) {
	reposDir := t.TempDir()
	r, err := repogen.Init(filepath.Join(reposDir, "o__r"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := r.Commit("", repogen.Change{Message: "root", Write: map[string]string{"pkg/n.py": "def g():\n    return 1\n"}})
	if err != nil {
		t.Fatal(err)
	}
	var commits []string
	for i := range 6 { // sibling snapshots of one size: the same files and history length, other values
		c, err := r.Commit(root, repogen.Change{Message: fmt.Sprint("commit ", i),
			Write: map[string]string{"pkg/m.py": fmt.Sprintf("def f():\n    return %d\n", i)}})
		if err != nil {
			t.Fatal(err)
		}
		commits = append(commits, c)
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	ctx := context.Background()
	opts := repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}
	probe, err := repoindex.Build(ctx, repos, "o/r", commits[len(commits)-1], opts)
	if err != nil {
		t.Fatal(err)
	}
	size := probe.Bytes()
	probe.Close()
	budget := size*5/2 + 1 // two idle indexes fit, a third does not
	type report struct {
		open          int
		bytes, budget int64
	}
	var reports []report
	cfg := Config{Bus: &bus.Bus{}, Repos: repos, Index: opts, Policies: builtinPolicies(t), KeepIndexes: 10, IndexMemory: budget,
		OnIndexMemory: func(open int, bytes, budget int64) { reports = append(reports, report{open, bytes, budget}) }}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	w := &farmWorker{cfg: cfg, indexes: map[string]*indexEntry{}}
	defer w.closeIndexes()
	for i, c := range commits {
		idx, release, err := w.index(ctx, "o/r", c, cfg.Index)
		if err != nil {
			t.Fatal(err)
		}
		if len(idx.Graph.Nodes) == 0 {
			t.Fatal("an index in use has no graph")
		}
		release()
		w.mu.Lock()
		open, bytes, _ := w.indexMemory()
		w.mu.Unlock()
		if bytes > budget {
			t.Errorf("after snapshot %d: %d open indexes hold %d bytes, over the budget of %d", i, open, bytes, budget)
		}
		if want := min(i+1, 2); open != want {
			t.Errorf("after snapshot %d: %d indexes open, want %d (KeepIndexes 10, but only two fit)", i, open, want)
		}
	}
	if _, ok := w.indexes[indexKey("o/r", commits[0], opts.Languages)]; ok {
		t.Error("the least recently used index is still open")
	}
	if _, ok := w.indexes[indexKey("o/r", commits[len(commits)-1], opts.Languages)]; !ok {
		t.Error("the most recently used index was closed")
	}
	if len(reports) != len(commits)*2 {
		t.Fatalf("%d memory reports for %d opens and releases", len(reports), len(commits))
	}
	for i, r := range reports {
		if r.budget != budget || (i%2 == 1 && r.bytes > budget) {
			t.Errorf("report %d: %+v (budget %d)", i, r, budget)
		}
	}
}

// TestAJobsLanguagesPickItsIndex: a worker reads a snapshot with the
// languages of the job (an instance's), so jobs of one snapshot read with
// two sets get two indexes, each with its own files; a job naming a
// language the worker does not read gets none.
func TestAJobsLanguagesPickItsIndex(t *testing.T) {
	reposDir := t.TempDir()
	r, err := repogen.Init(filepath.Join(reposDir, "o__r"))
	if err != nil {
		t.Fatal(err)
	}
	commit, err := r.Commit("", repogen.Change{Message: "base", Write: map[string]string{
		"app/main.py": "def main():\n    return 1\n", "web/app.js": "function mount() { return 1; }\n", "cli/main.go": "package main\n\nfunc main() {}\n"}})
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(reposDir)
	defer repos.Close()
	cfg := Config{Bus: &bus.Bus{}, Repos: repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{}, golang.Language{}, typescript.Language{})},
		Policies: builtinPolicies(t), KeepIndexes: 4}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	w := &farmWorker{cfg: cfg, indexes: map[string]*indexEntry{}}
	defer w.closeIndexes()
	files := func(languages []string) []string {
		t.Helper()
		opts, err := w.cfg.Index.For(languages) // as handle reads a job's
		if err != nil {
			t.Fatal(err)
		}
		idx, release, err := w.index(context.Background(), "o/r", commit, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		var out []string
		for _, f := range idx.Graph.Files() {
			out = append(out, f.Path)
		}
		return out
	}
	for _, c := range []struct {
		languages []string
		want      []string
	}{
		{[]string{"python"}, []string{"app/main.py"}},
		{[]string{"go", "js"}, []string{"cli/main.go", "web/app.js"}},
		{nil, []string{"app/main.py", "cli/main.go", "web/app.js"}}, // a job of an older coordinator: every language
	} {
		if got := files(c.languages); !slices.Equal(got, c.want) {
			t.Errorf("languages %v: files %v, want %v", c.languages, got, c.want)
		}
	}
	if len(w.indexes) != 3 {
		t.Errorf("%d indexes for one snapshot read with three sets", len(w.indexes))
	}
	if _, err := w.cfg.Index.For([]string{"java"}); err == nil || !strings.Contains(err.Error(), `"java" is not a language a2farm reads (python, go, typescript)`) {
		t.Errorf("a language the worker does not read: %v", err)
	}
}

// builtinPolicies is what a worker started without endpoint flags plays:
// heuristic, and openai for no model.
func builtinPolicies(tb testing.TB) *policy.Registry {
	tb.Helper()
	reg, err := policy.NewRegistry(policy.RegistryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return reg
}

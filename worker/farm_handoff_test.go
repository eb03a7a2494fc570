package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/policy"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// slowPython is Python whose every index build takes at least delay: a
// big repository's cold build, on the sample's small one.
type slowPython struct {
	python.Language
	delay time.Duration
}

func (l slowPython) Version() string { return l.Language.Version() + "-slow" }

func (l slowPython) Link(g *lang.Graph, units []lang.Unit) {
	time.Sleep(l.delay)
	l.Language.Link(g, units)
}

// TestBusyWorkersGetTheJobsAnIdleWorkerCannotPlay: while the workers that
// have the repository are busy building slow indexes, an idle worker
// without it pulls most of the jobs. It hands each to one of the busy
// workers by name, which keeps it until a slot frees: every job gets a
// real trajectory, none is dead-lettered, and each is handed off at most
// once. (A blind re-queue went back to the idle worker, which spent the
// job's hand-offs and deliveries in seconds and dead-lettered it.)
func TestBusyWorkersGetTheJobsAnIdleWorkerCannotPlay(t *testing.T) {
	f := newPolicyFarm(t)
	reg, err := policy.NewRegistry(policy.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	empty := gitrepo.NewSet(t.TempDir())
	defer empty.Close()
	slow := lang.NewSet(slowPython{delay: 3 * time.Second})

	var handOffs atomic.Int64
	var mu sync.Mutex
	settledByLacker := map[string]int{}
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	start := func(cfg Config) {
		cfg.Bus, cfg.Policies, cfg.Grace, cfg.Log = f.b, reg, time.Second, zerolog.Nop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Run(ctx, cfg); err != nil {
				t.Error(err)
			}
		}()
		checkfor.Within(t, 10*time.Second, 20*time.Millisecond, func() error {
			_, err := f.b.Workers.Get(f.ctx, cfg.WorkerID)
			return err
		})
	}
	defer func() { cancel(); wg.Wait() }()
	// One slot each, and an index of their own: each builds every
	// snapshot, slowly, one job at a time.
	for _, id := range []string{"has-repos-1", "has-repos-2"} {
		start(Config{WorkerID: id, Repos: f.repos, Index: repoindex.BuildOptions{Languages: slow}, Concurrency: 1, LocalIndexes: true})
	}
	start(Config{WorkerID: "no-repos", Repos: empty, Index: repoindex.BuildOptions{Languages: slow}, Concurrency: 4,
		OnHandOff: func(why string) {
			if why != HandOffSnapshot {
				t.Errorf("handed off because of %q, want %q", why, HandOffSnapshot)
			}
			handOffs.Add(1)
		},
		OnJobSettled: func(jobID, _ string) { mu.Lock(); settledByLacker[jobID]++; mu.Unlock() }})

	spec := schema.RunSpec{Seed: 1, Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	pub, err := coordinator.Publish(f.ctx, coordinator.RunConfig{Bus: f.b, RunID: "busy", Instances: f.l.Instances, Samples: 4, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	got := f.collect(pub.Manifest.Expected, 90*time.Second)
	if len(got) != pub.Manifest.Expected {
		t.Fatalf("%d of %d jobs answered", len(got), pub.Manifest.Expected)
	}
	for id, tr := range got {
		if tr.Status != schema.StatusOK || tr.WorkerID == "no-repos" || len(tr.Turns) == 0 {
			t.Errorf("%s: status %s (%s) by %s, %d turns", id, tr.Status, tr.Error, tr.WorkerID, len(tr.Turns))
		}
	}
	if dead, _ := f.b.DeadCount(f.ctx, "busy"); dead != 0 {
		t.Errorf("%d jobs dead-lettered although two live workers had the repository", dead)
	}
	n := handOffs.Load()
	if n == 0 {
		t.Error("the idle worker handed no job off: the test did not make it pull any")
	}
	mu.Lock()
	defer mu.Unlock()
	for id, times := range settledByLacker {
		if times > 1 {
			t.Errorf("job %s reached the worker without the repository %d times", id, times)
		}
	}
	if n > int64(len(settledByLacker)) {
		t.Errorf("%d hand-offs of %d jobs", n, len(settledByLacker))
	}
	t.Logf("%d jobs, %d handed off by the idle worker", len(got), n)
	// Its heartbeat counts what it did: no episode played, n handed on.
	checkfor.Within(t, 10*time.Second, 100*time.Millisecond, func() error {
		entry, err := f.b.Workers.Get(f.ctx, "no-repos")
		if err != nil {
			return err
		}
		var hb bus.Heartbeat
		if err := json.Unmarshal(entry.Value(), &hb); err != nil {
			return err
		}
		if hb.Done != 0 || hb.HandedOff != n {
			return fmt.Errorf("the idle worker reports %d played and %d handed on, want 0 and %d", hb.Done, hb.HandedOff, n)
		}
		return nil
	})
	depth, err := f.b.InboxDepth(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for inbox, left := range depth {
		if left != 0 {
			t.Errorf("inbox %s still holds %d jobs", inbox, left)
		}
	}
}

// TestJobsHandedToAWorkerThatIsGoneArePlayed: jobs waiting in the inbox of
// a worker that died are moved back to the queue by a live worker and
// played there, each once.
func TestJobsHandedToAWorkerThatIsGoneArePlayed(t *testing.T) {
	f := newPolicyFarm(t, func(c *bus.Config) { c.HeartbeatTTL = 2 * time.Second })
	spec := schema.RunSpec{Seed: 1, Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	var jobs []schema.Job
	for _, in := range f.l.Instances {
		for s := range int64(2) {
			job := spec.Job("orphans", 0, in, s)
			jobs = append(jobs, job)
			// Handed to a worker that never reads its inbox again; a
			// hand-off published twice is stored once.
			for range 2 {
				if err := f.b.HandOffTo(f.ctx, job, "died-1", []string{"lacker"}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	depth, err := f.b.InboxDepth(f.ctx)
	if err != nil || depth["died-1"] != uint64(len(jobs)) {
		t.Fatalf("inboxes hold %v (%v), want %d jobs for died-1", depth, err, len(jobs))
	}
	defer f.startWorker("alive", policy.RegistryConfig{})()
	got := f.collect(len(jobs), 30*time.Second)
	if len(got) != len(jobs) {
		t.Fatalf("%d of %d orphaned jobs answered", len(got), len(jobs))
	}
	for _, job := range jobs {
		if tr, ok := got[job.JobID]; !ok || tr.Status != schema.StatusOK || tr.WorkerID != "alive" {
			t.Errorf("%s: %+v", job.JobID, tr.Status)
		}
	}
	checkfor.Within(t, 5*time.Second, 50*time.Millisecond, func() error {
		depth, err := f.b.InboxDepth(f.ctx)
		if err != nil {
			return err
		}
		if depth["died-1"] != 0 {
			return fmt.Errorf("the dead worker's inbox still holds %d jobs", depth["died-1"])
		}
		return nil
	})
}

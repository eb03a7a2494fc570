package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/policy"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// replicaSpec plays the scripted stand-in's model: two searches, finish.
var replicaSpec = schema.RunSpec{Seed: 1, Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "scripted"},
	Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}

// servedBy is a registry whose any-model server has these replicas, with
// quick client retries so that a test waits seconds, not minutes.
func servedBy(replicas ...*policytest.Replica) policy.RegistryConfig {
	cfg := policy.EndpointConfig{MaxRetries: 1, RetryBackoff: 10 * time.Millisecond, RequestTimeout: 10 * time.Second}
	for _, r := range replicas {
		cfg.BaseURLs = append(cfg.BaseURLs, r.URL)
	}
	return policy.RegistryConfig{Endpoints: cfg}
}

// publish queues a run of the first two sample instances.
func (f *policyFarm) publish(runID string, samples int, spec schema.RunSpec) int {
	f.t.Helper()
	pub, err := coordinator.Publish(f.ctx, coordinator.RunConfig{Bus: f.b, RunID: runID, Instances: f.l.Instances[:2],
		Samples: samples, Spec: spec})
	if err != nil {
		f.t.Fatal(err)
	}
	return pub.Manifest.Expected
}

// collect reads trajectories until want have come or for at most wait.
func (f *policyFarm) collect(want int, wait time.Duration) map[string]schema.Trajectory {
	f.t.Helper()
	got := map[string]schema.Trajectory{}
	for deadline := time.Now().Add(wait); len(got) < want && time.Now().Before(deadline); {
		msg, err := f.cons.Next(jetstream.FetchMaxWait(min(time.Until(deadline), 2*time.Second)))
		if err != nil {
			continue
		}
		tr, err := f.b.DecodeTrajectory(f.ctx, msg)
		if err != nil {
			f.t.Fatal(err)
		}
		if _, dup := got[tr.JobID]; dup {
			f.t.Errorf("job %s has two trajectories", tr.JobID)
		}
		got[tr.JobID] = tr
	}
	return got
}

// replicasOf lists the replicas that answered a trajectory's turns.
func replicasOf(tr schema.Trajectory) []string {
	var out []string
	for _, t := range tr.Turns {
		if !slices.Contains(out, t.Replica) {
			out = append(out, t.Replica)
		}
	}
	return out
}

// TestEpisodesKeepToOneReplicaAndSpread: with two replicas of a model,
// every episode's turns go to one replica (also by the episode header a
// router would hash), and episodes spread over both.
func TestEpisodesKeepToOneReplicaAndSpread(t *testing.T) {
	f := newPolicyFarm(t)
	a := policytest.NewReplica(t, 30*time.Millisecond, policy.DefaultEpisodeHeader)
	b := policytest.NewReplica(t, 30*time.Millisecond, policy.DefaultEpisodeHeader)
	defer f.startWorker("w", servedBy(a, b))()
	trs := f.run("sticky", 4, replicaSpec)
	episodes := map[string]int{}
	for id, tr := range trs {
		if tr.Status != schema.StatusOK || len(tr.Turns) != 3 {
			t.Errorf("%s: %s %q with %d turns", id, tr.Status, tr.Error, len(tr.Turns))
		}
		on := replicasOf(tr)
		if len(on) != 1 || on[0] != a.URL && on[0] != b.URL {
			t.Errorf("%s: turns answered by %v, want one replica", id, on)
			continue
		}
		episodes[on[0]]++
	}
	if episodes[a.URL] == 0 || episodes[b.URL] == 0 {
		t.Errorf("episodes per replica %v: want both replicas used", episodes)
	}
	for id, n := range a.Episodes() {
		if _, both := b.Episodes()[id]; both || id == "" || n != 3 {
			t.Errorf("episode %q: %d requests to one replica, also on the other: %v", id, n, both)
		}
	}
}

// TestAReplicaKilledMidEpisodeFailsOver: a replica stops while episodes
// run on it; their turns move to the other replica, every trajectory is
// complete, and each turn names the replica that answered it.
func TestAReplicaKilledMidEpisodeFailsOver(t *testing.T) {
	f := newPolicyFarm(t)
	a := policytest.NewReplica(t, 200*time.Millisecond, policy.DefaultEpisodeHeader)
	b := policytest.NewReplica(t, 200*time.Millisecond, policy.DefaultEpisodeHeader)
	defer f.startWorker("w", servedBy(a, b))()
	want := f.publish("failover", 2, replicaSpec)
	// Stop a once an episode on it has had a turn answered.
	answered := func() bool {
		for _, n := range a.Episodes() {
			if n >= 2 {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !answered() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	a.Stop()
	trs := f.collect(want, 60*time.Second)
	if len(trs) != want {
		t.Fatalf("%d of %d jobs answered", len(trs), want)
	}
	moved := 0
	for id, tr := range trs {
		if tr.Status != schema.StatusOK || len(tr.Turns) != 3 {
			t.Errorf("%s: %s %q with %d turns, want it played to its end", id, tr.Status, tr.Error, len(tr.Turns))
		}
		if on := replicasOf(tr); len(on) == 2 {
			moved++
			if on[0] != a.URL || on[1] != b.URL {
				t.Errorf("%s: turns answered by %v, want %s then %s", id, on, a.URL, b.URL)
			}
		}
	}
	if moved == 0 {
		t.Error("no episode moved to the other replica")
	}
}

// TestAnOutageIsWaitedOutNotPublished: every replica down for longer
// than the client's retries: no job is answered meanwhile; once they
// are back every job is answered once, played to its end.
func TestAnOutageIsWaitedOutNotPublished(t *testing.T) {
	f := newPolicyFarm(t)
	a := policytest.NewReplica(t, 20*time.Millisecond, policy.DefaultEpisodeHeader)
	b := policytest.NewReplica(t, 20*time.Millisecond, policy.DefaultEpisodeHeader)
	defer f.startWorker("w", servedBy(a, b))()
	a.Stop()
	b.Stop()
	want := f.publish("outage", 3, replicaSpec)
	if early := f.collect(want, 4*time.Second); len(early) > 0 {
		for id, tr := range early {
			t.Errorf("%s answered during the outage: %s %q", id, tr.Status, tr.Error)
		}
	}
	a.Start(t)
	b.Start(t)
	trs := f.collect(want, 90*time.Second)
	if len(trs) != want {
		t.Fatalf("%d of %d jobs answered after the outage", len(trs), want)
	}
	for id, tr := range trs {
		if tr.Status != schema.StatusOK || len(tr.Turns) != 3 {
			t.Errorf("%s: %s %q with %d turns, want it played to its end", id, tr.Status, tr.Error, len(tr.Turns))
		}
	}
	if dead, _ := f.b.DeadCount(f.ctx, "outage"); dead != 0 {
		t.Errorf("%d jobs dead-lettered by an outage within its budget", dead)
	}
}

// TestARefusingReplicaIsThePolicysError: a server that answers 400 to
// every request is not an outage: each job is answered once with a
// policy_error trajectory, and the request is not retried.
func TestARefusingReplicaIsThePolicysError(t *testing.T) {
	f := newPolicyFarm(t)
	a := policytest.NewReplica(t, 0, policy.DefaultEpisodeHeader)
	a.Refuse(true)
	defer f.startWorker("w", servedBy(a))()
	trs := f.run("refused", 2, replicaSpec)
	for id, tr := range trs {
		if tr.Status != schema.StatusPolicyError || tr.Attempt > 1 {
			t.Errorf("%s: %s (attempt %d) %q, want one policy_error", id, tr.Status, tr.Attempt, tr.Error)
		}
	}
	if got := a.Requests(); got != int64(len(trs)) {
		t.Errorf("%d requests for %d jobs: a refused request was retried", got, len(trs))
	}
}

// TestAWorkerWithoutALiveReplicaDoesNotPull: a worker whose only replica
// is down pulls no job while another worker's replica serves the model;
// every job is played by the other, and the dead replica is never sent a
// chat request.
func TestAWorkerWithoutALiveReplicaDoesNotPull(t *testing.T) {
	f := newPolicyFarm(t)
	dead := policytest.NewReplica(t, 0, policy.DefaultEpisodeHeader)
	live := policytest.NewReplica(t, 20*time.Millisecond, policy.DefaultEpisodeHeader)
	dead.Stop()
	defer f.startWorker("cut-off", servedBy(dead))()
	defer f.startWorker("serving", servedBy(live))()
	for id, tr := range f.run("split-serving", 4, replicaSpec) {
		if tr.Status != schema.StatusOK || tr.WorkerID != "serving" {
			t.Errorf("%s: %s by %q", id, tr.Status, tr.WorkerID)
		}
	}
	if dead.Requests() != 0 {
		t.Errorf("the dead replica was sent %d chat requests", dead.Requests())
	}
	hb, err := f.b.LiveWorkers(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range hb {
		if w.ID == "cut-off" && (len(w.Replicas) != 1 || w.Replicas[0].Healthy) {
			t.Errorf("the cut-off worker reports %+v, want its replica failing", w.Replicas)
		}
	}
}

// TestAnOutageBeyondItsBudgetGivesTheJobUp: with no replica answering
// for longer than --policy-outage-budget, each job is given up once, with
// the reason: an infra_error trajectory and a dead letter.
func TestAnOutageBeyondItsBudgetGivesTheJobUp(t *testing.T) {
	f := newPolicyFarm(t)
	a := policytest.NewReplica(t, 0, policy.DefaultEpisodeHeader)
	a.Stop()
	defer f.startWorker("w", servedBy(a), func(c *Config) { c.OutageBudget = 2 * time.Second })()
	start := time.Now()
	trs := f.run("beyond", 1, replicaSpec)
	for id, tr := range trs {
		if tr.Status != schema.StatusInfraError || !strings.Contains(tr.Error, "outage budget 2s") {
			t.Errorf("%s: %s %q, want it given up for the outage", id, tr.Status, tr.Error)
		}
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Errorf("given up after %s, within the budget", waited)
	}
	if dead, err := f.b.DeadCount(f.ctx, "beyond"); err != nil || dead != len(trs) {
		t.Errorf("%d dead letters (%v), want %d", dead, err, len(trs))
	}
}

// TestLocalizeWaitsOutAnOutage: localize follows the farm's rule — an
// episode whose model cannot be reached is played again once a server
// answers (no policy_error), and is recorded as an infra_error only past
// the outage budget.
func TestLocalizeWaitsOutAnOutage(t *testing.T) {
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	for _, tc := range []struct {
		name    string
		down    time.Duration // then the replica starts again; 0: never
		budget  time.Duration
		status  schema.Status
		message string
	}{
		{name: "back within the budget", down: 3 * time.Second, budget: time.Minute, status: schema.StatusOK},
		{name: "beyond the budget", budget: 2 * time.Second, status: schema.StatusInfraError, message: "outage budget 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := policytest.NewReplica(t, 0, policy.DefaultEpisodeHeader)
			reg, err := policy.NewRegistry(servedBy(a))
			if err != nil {
				t.Fatal(err)
			}
			a.Stop()
			if tc.down > 0 {
				restart := time.AfterFunc(tc.down, func() { a.Start(t) })
				defer restart.Stop()
			}
			res, err := Localize(context.Background(), LocalizeConfig{Instances: l.Instances[:1], Repos: repos, Spec: replicaSpec,
				Policies: reg, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Samples: 2,
				Out: t.TempDir(), Log: zerolog.Nop(), OutageBudget: tc.budget})
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range res.Trajectories {
				if tr.Status != tc.status || !strings.Contains(tr.Error, tc.message) {
					t.Errorf("%s: %s %q, want %s %q", tr.JobID, tr.Status, tr.Error, tc.status, tc.message)
				}
			}
		})
	}
}

// TestPolicyOutageFigures measures the outage rows of docs/RELIABILITY.md
// (set A2FARM_BENCH_OUTAGE=1; `make bench-outage`): two stand-in replicas
// at 0.7 s a turn, 3 instances × 8 samples, two workers; one replica down
// for 25 s mid-run, then every replica down for 40 s.
func TestPolicyOutageFigures(t *testing.T) {
	if os.Getenv("A2FARM_BENCH_OUTAGE") == "" {
		t.Skip("set A2FARM_BENCH_OUTAGE=1 (make bench-outage): two minutes of outages")
	}
	for _, tc := range []struct {
		name string
		down func(a, b *policytest.Replica) []*policytest.Replica
		for_ time.Duration
	}{
		{"one replica down 25 s", func(a, _ *policytest.Replica) []*policytest.Replica { return []*policytest.Replica{a} }, 25 * time.Second},
		{"every replica down 40 s", func(a, b *policytest.Replica) []*policytest.Replica { return []*policytest.Replica{a, b} }, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPolicyFarm(t)
			a := policytest.NewReplica(t, 700*time.Millisecond, policy.DefaultEpisodeHeader)
			b := policytest.NewReplica(t, 700*time.Millisecond, policy.DefaultEpisodeHeader)
			cfg := servedBy(a, b)
			cfg.Endpoints.MaxRetries, cfg.Endpoints.RetryBackoff = 2, 500*time.Millisecond
			defer f.startWorker("w-1", cfg)()
			defer f.startWorker("w-2", cfg)()
			runID := strings.ReplaceAll(tc.name, " ", "-")
			pub, err := coordinator.Publish(f.ctx, coordinator.RunConfig{Bus: f.b, RunID: runID, Instances: f.l.Instances[:3],
				Samples: 8, Spec: replicaSpec})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cut := tc.down(a, b)
			go func() {
				time.Sleep(2 * time.Second)
				for _, r := range cut {
					r.Stop()
				}
				time.Sleep(tc.for_)
				for _, r := range cut {
					r.Start(t)
				}
			}()
			trs := f.collect(pub.Manifest.Expected, 5*time.Minute)
			status := map[schema.Status]int{}
			played, moved := 0, 0
			perInstance := map[string]int{}
			for _, tr := range trs {
				status[tr.Status]++
				if tr.Status.PlayedOut() {
					played++
					perInstance[tr.InstanceID]++
				}
				if len(replicasOf(tr)) > 1 {
					moved++
				}
			}
			dead, _ := f.b.DeadCount(f.ctx, runID)
			t.Logf("%s: %d/%d jobs answered in %s: %v; %d played out (per instance %v), %d moved replica mid-episode, %d dead letters; requests a %d, b %d",
				tc.name, len(trs), pub.Manifest.Expected, time.Since(start).Round(time.Second), status, played, perInstance, moved, dead,
				a.Requests(), b.Requests())
			if played != pub.Manifest.Expected || dead != 0 {
				t.Errorf("%d of %d jobs played out, %d dead letters", played, pub.Manifest.Expected, dead)
			}
		})
	}
}

package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/policy"
)

// adapterDir is a folder a replica accepts as a LoRA adapter.
func adapterDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run-it1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"r":16}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loraReplica is a replica serving "base" with adapter name loaded from
// path at start.
func loraReplica(t *testing.T, name, path string) *policytest.Replica {
	t.Helper()
	r := policytest.NewReplica(t, 20*time.Millisecond, policy.DefaultEpisodeHeader)
	r.EnableLoRA("base")
	c, err := llm.New(llm.Config{BaseURL: r.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadLoRA(context.Background(), name, path); err != nil {
		t.Fatal(err)
	}
	return r
}

func adapterSpec(path string) schema.RunSpec {
	spec := replicaSpec
	spec.Policy.Model, spec.Policy.Adapter = "run-it1", path
	return spec
}

// TestAReplicaThatForgotTheAdapterGetsItAgain: both replicas restart
// between iterations and forget the adapter loaded at run time; the first
// episode on each finds "does not exist", loads it there again from the
// job's path, and goes on. No turn becomes a policy_error.
func TestAReplicaThatForgotTheAdapterGetsItAgain(t *testing.T) {
	f := newPolicyFarm(t)
	path := adapterDir(t)
	a, b := loraReplica(t, "run-it1", path), loraReplica(t, "run-it1", path)
	for _, r := range []*policytest.Replica{a, b} {
		r.Stop()
		r.Start(t)
	}
	defer f.startWorker("w", servedBy(a, b))()
	trs := f.run("forgot", 4, adapterSpec(path))
	for id, tr := range trs {
		if tr.Status != schema.StatusOK || len(tr.Turns) != 3 || tr.Attempt > 1 {
			t.Errorf("%s: %s (attempt %d) %q with %d turns", id, tr.Status, tr.Attempt, tr.Error, len(tr.Turns))
		}
	}
	for name, r := range map[string]*policytest.Replica{"a": a, "b": b} {
		loads := r.Loads()
		if len(loads) < 2 || loads[1] != (policytest.Load{Op: "load", Name: "run-it1", Path: path}) {
			t.Errorf("replica %s received %v: want the start's load, then the adapter loaded again", name, loads)
		}
		if n := r.Served()["run-it1"]; n == 0 {
			t.Errorf("replica %s served no turn with the adapter after its restart", name)
		}
	}
}

// TestAReplicaThatCannotLoadTheAdapterIsSkippedForIt: one replica forgot
// the adapter and refuses to load it again; its episodes move to the
// replica that has it, every job is played once, and none is a
// policy_error.
func TestAReplicaThatCannotLoadTheAdapterIsSkippedForIt(t *testing.T) {
	f := newPolicyFarm(t)
	path := adapterDir(t)
	a, b := loraReplica(t, "run-it1", path), loraReplica(t, "run-it1", path)
	a.Stop()
	a.Start(t)
	a.RefuseLoads(true)
	defer f.startWorker("w", servedBy(a, b))()
	trs := f.run("skipped", 4, adapterSpec(path))
	for id, tr := range trs {
		if tr.Status != schema.StatusOK || tr.Attempt > 1 || !slices.Equal(replicasOf(tr), []string{b.URL}) {
			t.Errorf("%s: %s (attempt %d) %q on %v, want ok on the replica with the adapter", id, tr.Status, tr.Attempt, tr.Error, replicasOf(tr))
		}
	}
	if n := a.Served()["run-it1"]; n != 0 {
		t.Errorf("the replica without the adapter served %d turns with it", n)
	}
}

// TestNoReplicaWithTheAdapterIsAnOutageNotAPolicyError: when no replica
// serves the adapter (forgotten, and the job names no path to load it
// from), jobs wait as in an outage instead of being answered as the
// policy's error; once a replica has it again, they are played.
func TestNoReplicaWithTheAdapterIsAnOutageNotAPolicyError(t *testing.T) {
	f := newPolicyFarm(t)
	path := adapterDir(t)
	a := loraReplica(t, "run-it1", path)
	a.Stop()
	a.Start(t)
	defer f.startWorker("w", servedBy(a))()
	spec := adapterSpec("")
	want := f.publish("outage", 2, spec)
	if got := f.collect(want, 3*time.Second); len(got) != 0 {
		for id, tr := range got {
			t.Errorf("%s answered %s %q while no replica served the adapter", id, tr.Status, tr.Error)
		}
	}
	c, err := llm.New(llm.Config{BaseURL: a.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadLoRA(context.Background(), "run-it1", path); err != nil {
		t.Fatal(err)
	}
	got := f.collect(want, 60*time.Second)
	if len(got) != want {
		t.Fatalf("%d of %d trajectories after the adapter came back", len(got), want)
	}
	for id, tr := range got {
		if tr.Status != schema.StatusOK {
			t.Errorf("%s: %s %q", id, tr.Status, tr.Error)
		}
	}
}

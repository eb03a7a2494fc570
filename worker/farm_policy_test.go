package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/repoindex"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/policy"
)

// shortEpisode answers one code search, then finish.
func shortEpisode(req policytest.Request) policytest.Reply {
	turn := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turn++
		}
	}
	call := schema.ToolCall{ID: fmt.Sprintf("chatcmpl-tool-%d", turn), Type: "function",
		Function: schema.FunctionCall{Name: "search_code_snippets", Arguments: `{"search_terms": ["Warehouse"]}`}}
	if turn > 0 {
		call.Function = schema.FunctionCall{Name: "finish", Arguments: `{"answer": "inventory/models.py"}`}
	}
	return policytest.Reply{ToolCalls: []schema.ToolCall{call}, FinishReason: "tool_calls"}
}

// policyFarm is an in-process farm: JetStream, the built-in sample, and
// workers that are started and stopped by the test.
type policyFarm struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	b     *bus.Bus
	l     *sample.Layout
	repos *gitrepo.Set
	cons  jetstream.Consumer
}

// newPolicyFarm opens the farm's topology, with an ack wait of 5 s and
// what tune changes.
func newPolicyFarm(t *testing.T, tune ...func(*bus.Config)) *policyFarm {
	_, js := natstest.New(t)
	ctx := context.Background()
	cfg := bus.DefaultConfig()
	cfg.AckWait = 5 * time.Second
	for _, f := range tune {
		f(&cfg)
	}
	b, err := bus.Open(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	t.Cleanup(func() { repos.Close() })
	cons, err := js.OrderedConsumer(ctx, bus.TrajStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &policyFarm{t: t, ctx: ctx, js: js, b: b, l: l, repos: repos, cons: cons}
}

// startWorker runs a worker serving what cfg says until the returned
// stop; tune, when given, changes its configuration.
func (f *policyFarm) startWorker(id string, cfg policy.RegistryConfig, tune ...func(*Config)) (stop func()) {
	reg, err := policy.NewRegistry(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wcfg := Config{Bus: f.b, Repos: f.repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: reg, Concurrency: 4, Grace: time.Second,
			WorkerID: id, Log: zerolog.Nop()}
		for _, t := range tune {
			t(&wcfg)
		}
		if err := Run(ctx, wcfg); err != nil {
			f.t.Error(err)
		}
	}()
	// Wait for its heartbeat, which tells other workers what it offers.
	checkfor.Within(f.t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := f.b.Workers.Get(f.ctx, id)
		return err
	})
	return func() { cancel(); wg.Wait() }
}

// run publishes a run of the sample with spec and returns its
// trajectories, one per job.
func (f *policyFarm) run(runID string, samples int, spec schema.RunSpec) map[string]schema.Trajectory {
	f.t.Helper()
	pub, err := coordinator.Publish(f.ctx, coordinator.RunConfig{Bus: f.b, RunID: runID, Instances: f.l.Instances[:2],
		Samples: samples, Spec: spec})
	if err != nil {
		f.t.Fatal(err)
	}
	m := pub.Manifest
	got := f.collect(m.Expected, 60*time.Second)
	if len(got) != m.Expected {
		f.t.Fatalf("run %s: %d of %d trajectories", runID, len(got), m.Expected)
	}
	return got
}

// sentRequest is what the policy server received, field by field.
type sentRequest struct {
	Model             string   `json:"model"`
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int64   `json:"top_k"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	MaxTokens         *int64   `json:"max_tokens"`
	Seed              *int64   `json:"seed"`
	ReturnTokenIDs    *bool    `json:"return_token_ids"`
}

func decodeSent(t *testing.T, bodies [][]byte) []sentRequest {
	t.Helper()
	out := make([]sentRequest, len(bodies))
	for i, b := range bodies {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

// TestTheRunDecidesWhatActs: workers that carry only a base URL send
// each run's model and sampling, a second run on the same workers sends
// its own, and every trajectory records what produced it.
func TestTheRunDecidesWhatActs(t *testing.T) {
	f := newPolicyFarm(t)
	srv := policytest.NewRecorder(t, shortEpisode)
	onlyBaseURL := policy.RegistryConfig{Endpoints: policy.EndpointConfig{BaseURLs: []string{srv.URL}}}
	defer f.startWorker("w1", onlyBaseURL)()
	defer f.startWorker("w2", onlyBaseURL)()

	runs := []struct {
		id   string
		spec schema.RunSpec
	}{
		{"iter1", schema.RunSpec{Seed: 7, Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "adapter-1", Version: "iter1", ReturnTokenIDs: true},
			Sampling: schema.Sampling{Temperature: 1, TopP: 0.8, TopK: 20, RepetitionPenalty: 1.05, MaxTokens: 512},
			Limits:   schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000, WallTimeSeconds: 60}}},
		{"eval", schema.RunSpec{Seed: 1234, Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "adapter-2", Version: "iter2"},
			Sampling: schema.Sampling{Temperature: 0, TopP: 0.95, TopK: 5, RepetitionPenalty: 1.2, MaxTokens: 64},
			Limits:   schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000, WallTimeSeconds: 60}}},
	}
	const samples = 3
	for _, r := range runs {
		srv.Reset()
		trs := f.run(r.id, samples, r.spec)
		sent := decodeSent(t, srv.Bodies())
		if len(sent) != 2*samples*2 { // two instances, two turns each
			t.Fatalf("run %s: the server saw %d requests, want %d", r.id, len(sent), 2*samples*2)
		}
		wantSeeds := map[int64]int{}
		for s := range int64(samples) {
			for turn := range int64(2) {
				wantSeeds[schema.SampleSeed(r.spec.Seed, s)+turn] += 2 // both instances
			}
		}
		s := r.spec.Sampling
		for i, req := range sent {
			ok := req.Model == r.spec.Policy.Model && req.Temperature != nil && *req.Temperature == s.Temperature &&
				req.TopP != nil && *req.TopP == s.TopP && req.TopK != nil && *req.TopK == s.TopK &&
				req.RepetitionPenalty != nil && *req.RepetitionPenalty == s.RepetitionPenalty &&
				req.MaxTokens != nil && *req.MaxTokens == s.MaxTokens && req.Seed != nil &&
				(req.ReturnTokenIDs != nil) == r.spec.Policy.ReturnTokenIDs
			if !ok {
				t.Errorf("run %s request %d sent %s, want the run's policy and sampling", r.id, i, srv.Bodies()[i])
				continue
			}
			wantSeeds[*req.Seed]--
		}
		for seed, n := range wantSeeds {
			if n != 0 {
				t.Errorf("run %s: seed %d sent %d times too few", r.id, seed, n)
			}
		}
		for id, tr := range trs {
			want := r.spec.Policy
			want.Endpoint = srv.URL
			if tr.Status != schema.StatusOK || tr.Policy != want || tr.Sampling.Temperature != s.Temperature ||
				tr.Sampling.Seed != schema.SampleSeed(r.spec.Seed, tr.Sample) {
				t.Errorf("run %s trajectory %s: status %s, policy %+v, sampling %+v", r.id, id, tr.Status, tr.Policy, tr.Sampling)
			}
		}
	}
}

// TestAJobIsNeverPlayedByAnotherPolicy: a worker that cannot serve a
// job's model hands it to one that can; with none left that can, the job
// is given up with the reason — never played by another model.
func TestAJobIsNeverPlayedByAnotherPolicy(t *testing.T) {
	f := newPolicyFarm(t)
	srv := policytest.NewRecorder(t, shortEpisode)
	onlyA := policy.RegistryConfig{Endpoints: policy.EndpointConfig{Models: map[string][]string{"adapter-a": {srv.URL}}}}
	stopA := f.startWorker("serves-a", onlyA)
	defer stopA()

	// Another worker serves any model: jobs for adapter-b go to it.
	stopAny := f.startWorker("serves-any", policy.RegistryConfig{Endpoints: policy.EndpointConfig{BaseURLs: []string{srv.URL}}})
	specB := schema.RunSpec{Seed: 3, Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "adapter-b"},
		Sampling: schema.Sampling{Temperature: 1}, Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	for id, tr := range f.run("handed-over", 4, specB) {
		if tr.Status != schema.StatusOK || tr.WorkerID != "serves-any" || tr.Policy.Model != "adapter-b" {
			t.Errorf("%s: status %s, worker %s, model %s", id, tr.Status, tr.WorkerID, tr.Policy.Model)
		}
	}
	stopAny()

	// Now no live worker serves adapter-b, nor the replay kind.
	srv.Reset()
	for _, spec := range []schema.RunSpec{specB, {Policy: schema.Policy{Kind: schema.PolicyReplay}}} {
		runID := "unservable-" + string(spec.Policy.Kind)
		for id, tr := range f.run(runID, 2, spec) {
			if tr.Status != schema.StatusInfraError || len(tr.Turns) != 0 || tr.Policy != spec.Policy ||
				!strings.Contains(tr.Error, "cannot serve") {
				t.Errorf("%s: status %s, %d turns, policy %+v, error %q", id, tr.Status, len(tr.Turns), tr.Policy, tr.Error)
			}
		}
		// A dead letter is stored right after its job's trajectory.
		var dead []bus.DeadLetter
		checkfor.Within(t, 5*time.Second, 20*time.Millisecond, func() error {
			dead, _ = f.b.DeadLetters(f.ctx, runID)
			if len(dead) != 4 {
				return fmt.Errorf("%d dead letters, want 4", len(dead))
			}
			return nil
		})
		for _, dl := range dead {
			if !strings.Contains(dl.Reason, "serves-a cannot serve") {
				t.Errorf("dead letter of %s: reason %q", dl.Job.JobID, dl.Reason)
			}
		}
	}
	if n := len(srv.Bodies()); n != 0 {
		t.Errorf("the policy server saw %d requests for jobs nobody serves", n)
	}
}

// TestAWorkerWithoutTheRepositoryPassesTheJobOn: a worker whose
// repositories lack a job's snapshot hands the job to one that has it; no
// job is lost or given up, and the worker advertises what it lacks.
func TestAWorkerWithoutTheRepositoryPassesTheJobOn(t *testing.T) {
	f := newPolicyFarm(t)
	reg, err := policy.NewRegistry(policy.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	empty := gitrepo.NewSet(t.TempDir())
	defer empty.Close()
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	for _, w := range []struct {
		id    string
		repos *gitrepo.Set
	}{{"no-repos", empty}, {"has-repos", f.repos}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Run(ctx, Config{Bus: f.b, Repos: w.repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: reg, Concurrency: 4, Grace: time.Second,
				WorkerID: w.id, Log: zerolog.Nop()}); err != nil {
				t.Error(err)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	spec := schema.RunSpec{Seed: 1, Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	for id, tr := range f.run("split", 6, spec) {
		if tr.Status != schema.StatusOK || tr.WorkerID != "has-repos" {
			t.Errorf("%s: status %s (%s) by %s", id, tr.Status, tr.Error, tr.WorkerID)
		}
	}
	if dead, _ := f.b.DeadCount(f.ctx, "split"); dead != 0 {
		t.Errorf("%d jobs dead-lettered although a worker had the repository", dead)
	}
	live, err := f.b.LiveWorkers(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, hb := range live {
		want := hb.ID == "no-repos"
		if got := len(hb.Lacks) > 0; got != want {
			t.Errorf("worker %s advertises lacking %v", hb.ID, hb.Lacks)
		}
	}
}

// TestABranchReplaysItsParentFromTheLog: a worker plays a branch job by
// reading its parent's trajectory from the log at the sequence the job
// names; when that record is gone or holds another job, the branch is
// given up with the reason (an infra_error and a dead letter), never
// played from another record.
func TestABranchReplaysItsParentFromTheLog(t *testing.T) {
	f := newPolicyFarm(t)
	defer f.startWorker("w", policy.RegistryConfig{})()
	spec := schema.RunSpec{Seed: 1, Policy: schema.Policy{Kind: schema.PolicyHeuristic}, Limits: schema.Limits{MaxToolCalls: 20, MaxContextTokens: 40000}}
	parents := f.run("fork", 1, spec)
	seqOf := map[string]int64{}
	for seq := int64(1); len(seqOf) < len(parents); seq++ {
		tr, err := f.b.TrajectoryAt(f.ctx, seq)
		if err != nil {
			t.Fatalf("log message %d: %v", seq, err)
		}
		seqOf[tr.JobID] = seq
	}
	in0, in1 := f.l.Instances[0], f.l.Instances[1]
	p0 := parents[schema.JobID("fork", 0, in0.InstanceID, 0)]
	p1 := parents[schema.JobID("fork", 0, in1.InstanceID, 0)]
	branch := func(in schema.Instance, p schema.Trajectory, sample, logSeq int64) schema.Job {
		return spec.Branch("fork", 0, in, sample, schema.Fork{ParentJobID: p.JobID, ParentSample: p.Sample, Turn: 1, LogSeq: logSeq})
	}
	jobs := []schema.Job{
		branch(in0, p0, 1, seqOf[p0.JobID]), // played
		branch(in0, p0, 2, 9999),            // gone
		branch(in1, p1, 1, seqOf[p0.JobID]), // another job's record
	}
	for _, j := range jobs {
		if err := f.b.PublishJob(f.ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]schema.Trajectory{}
	for deadline := time.Now().Add(30 * time.Second); len(got) < len(jobs) && time.Now().Before(deadline); {
		msg, err := f.cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			continue
		}
		tr, err := f.b.DecodeTrajectory(f.ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		got[tr.JobID] = tr
	}
	if tr := got[jobs[0].JobID]; tr.Status != schema.StatusOK || tr.OwnTurns() != 1 || !reflect.DeepEqual(tr.Turns[0], p0.Turns[0]) {
		t.Errorf("the branch of a record in the log: %s %q, %d turns replayed", tr.Status, tr.Error, tr.OwnTurns())
	}
	for _, j := range jobs[1:] {
		if tr := got[j.JobID]; tr.Status != schema.StatusInfraError || !strings.Contains(tr.Error, "record of parent") {
			t.Errorf("%s: %s %q, want it given up because its parent's record is gone", j.JobID, tr.Status, tr.Error)
		}
	}
	if dead, err := f.b.DeadCount(f.ctx, "fork"); err != nil || dead != 2 {
		t.Errorf("%d dead letters (%v), want the 2 branches without a record", dead, err)
	}
}

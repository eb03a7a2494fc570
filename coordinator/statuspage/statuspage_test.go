package statuspage

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/browsertest"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

// farm publishes a run of 3 instances × 2 samples on a real JetStream,
// answers two of its jobs, has one worker beating and a learner's
// consumer that nobody reads (a learner that stopped); the clock runs from
// the run's creation, a minute per sample.
func farm(t *testing.T) (*Server, *time.Time) {
	t.Helper()
	_, js := natstest.New(t)
	ctx := context.Background()
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	spec := schema.RunSpec{Policy: schema.Policy{Kind: schema.PolicyHeuristic}}
	cfg := coordinator.RunConfig{Bus: b, RunID: "run-a", Samples: 2, Spec: spec}
	for _, id := range []string{"o__r-1", "o__r-2", "o__r-3"} {
		cfg.Instances = append(cfg.Instances, schema.Instance{InstanceID: id, Repo: "o/r", BaseCommit: "abc"})
	}
	pub, err := coordinator.Publish(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Traj.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: bus.LearnerConsumer,
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for s := range int64(2) {
		job := spec.Job(cfg.RunID, 0, cfg.Instances[0], s)
		if err := b.PublishTrajectory(ctx, job.Trajectory(schema.StatusOK)); err != nil {
			t.Fatal(err)
		}
	}
	now := pub.Manifest.Created
	hb, _ := json.Marshal(bus.Heartbeat{ID: "w-1", Host: "gpu-7", Active: 3, Capacity: 8, Done: 2,
		Policies: []string{"heuristic"}, Version: "test", Updated: now.Add(3 * time.Minute),
		Replicas: []bus.ReplicaLoad{{Model: "qwen", URL: "http://gpu-7:8000/v1", InFlight: 2, Requests: 41, Errors: 1, Healthy: true},
			{Model: "qwen", URL: "http://gpu-8:8000/v1", Requests: 9, Errors: 5}}})
	if _, err := b.Workers.Put(ctx, "w-1", hb); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Every: time.Minute, Now: func() time.Time { return now },
		Status: func(ctx context.Context, at time.Time) (*coordinator.FarmStatus, error) {
			return coordinator.Status(ctx, b, "", at)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return s, &now
}

// sampled samples the farm n times, a minute apart.
func sampled(t *testing.T, n int) *Server {
	t.Helper()
	s, now := farm(t)
	for range n {
		*now = now.Add(time.Minute)
		s.Sample(context.Background())
	}
	return s
}

func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestStatusJSONHoldsThePlottedNumbers: the history behind the queue plot
// and the state behind the tables.
func TestStatusJSONHoldsThePlottedNumbers(t *testing.T) {
	s := sampled(t, 3)
	code, body := get(t, s.Handler(), http.MethodGet, "/status.json")
	if code != http.StatusOK {
		t.Fatalf("status.json: %d %s", code, body)
	}
	var snap snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.History) != 3 {
		t.Fatalf("history has %d samples, want 3", len(snap.History))
	}
	for i, h := range snap.History {
		// 6 jobs, none taken by a worker: all pending; nobody reads the
		// learner's consumer, so the two trajectories wait in it.
		if h.Pending != 6 || h.InFlight != 0 || h.Redelivered != 0 || h.Backlog != 2 {
			t.Errorf("sample %d = %+v, want 6 pending, 0 in flight, 0 redelivered, 2 waiting for the learner", i, h)
		}
		if i > 0 && h.At.Sub(snap.History[i-1].At) != time.Minute {
			t.Errorf("samples %d and %d are %s apart, want 1m", i-1, i, h.At.Sub(snap.History[i-1].At))
		}
	}
	r := snap.Status.Runs
	if len(r) != 1 || r[0].Expected != 6 || r[0].Accounted != 2 || r[0].Groups != 3 {
		t.Errorf("runs = %+v, want run-a with 2 of 6 accounted over 3 groups", r)
	}
	if w := snap.Status.Workers; len(w) != 1 || w[0].Active != 3 || w[0].Capacity != 8 {
		t.Errorf("workers = %+v, want w-1 running 3 of 8", w)
	}
}

// TestHistoryKeepsTheWindow: samples older than the window are dropped.
func TestHistoryKeepsTheWindow(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	s, err := New(Config{Window: 10 * time.Minute, Now: func() time.Time { return now },
		Status: func(_ context.Context, at time.Time) (*coordinator.FarmStatus, error) {
			return &coordinator.FarmStatus{At: at, Pending: 1}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		now = now.Add(time.Minute)
		s.Sample(context.Background())
	}
	snap := s.snapshot()
	if len(snap.History) != 11 || now.Sub(snap.History[0].At) != 10*time.Minute {
		t.Errorf("%d samples from %s before now, want 11 from 10m", len(snap.History), now.Sub(snap.History[0].At))
	}
}

func TestReadOnly(t *testing.T) {
	s := sampled(t, 1)
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		if code, _ := get(t, s.Handler(), method, "/"); code != http.StatusMethodNotAllowed {
			t.Errorf("%s / = %d, want 405", method, code)
		}
	}
	if code, _ := get(t, s.Handler(), http.MethodGet, "/jobs/retry"); code != http.StatusNotFound {
		t.Errorf("GET /jobs/retry = %d, want 404", code)
	}
}

func TestListenAddrDefaultsToLoopback(t *testing.T) {
	for in, want := range map[string]string{":8090": "127.0.0.1:8090", "0.0.0.0:80": "0.0.0.0:80", "[::1]:9": "[::1]:9"} {
		if got, err := ListenAddr(in); err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ListenAddr("8090"); err == nil {
		t.Error("a bare port: want an error")
	}
}

// TestServeOnLoopback: Serve listens where it says, serves the page and
// stops with its context.
func TestServeOnLoopback(t *testing.T) {
	s := sampled(t, 1)
	ln, err := Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, s.cfg) }()
	u := URL(ln)
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("serving at %s, want loopback", u)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "a2farm status") {
		t.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	if _, err := Listen("256.0.0.1:1"); err == nil {
		t.Error("an address that cannot be bound: want an error")
	}
}

// TestPageInABrowser opens the page in headless Chromium: both plots draw,
// the numbers are on it, no error occurs.
func TestPageInABrowser(t *testing.T) {
	s := sampled(t, 12)
	code, page := get(t, s.Handler(), http.MethodGet, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, page)
	}
	if !strings.Contains(page, `http-equiv="refresh" content="10"`) {
		t.Error("the page does not refresh itself")
	}
	seen := browsertest.Open(t, []byte(page))
	if seen.Plots != 2 || seen.Drawn != 2 {
		t.Errorf("the browser drew %d of %d plots, want the queue and the load; undrawn %v", seen.Drawn, seen.Plots, seen.Undrawn)
	}
	if len(seen.Errors) > 0 {
		t.Errorf("errors in the browser: %v", seen.Errors)
	}
	for _, want := range []string{"6 pending", "w-1", "gpu-7", "3/8", "38%", "run-a", "2/6", "0/3", "Learner: none receiving; 2 trajectories waiting",
		"http://gpu-7:8000/v1", "http://gpu-8:8000/v1", "failing (backing off)"} {
		if !strings.Contains(seen.Text, want) {
			t.Errorf("the page's text lacks %q:\n%s", want, seen.Text)
		}
	}
	if dir := os.Getenv("A2FARM_SCREENSHOTS"); dir != "" {
		browsertest.Screenshot(t, []byte(page), filepath.Join(dir, "status.png"), 1280, 1450)
	}
}

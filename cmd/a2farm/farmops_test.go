package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/internal/embednats"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

// TestStatusAndJobsRetry: a job that fails every delivery shows up as dead
// in `status`; `jobs retry` puts it back in the queue as attempt 2.
func TestStatusAndJobsRetry(t *testing.T) {
	srv := natstest.Server(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cfg := bus.DefaultConfig()
	cfg.AckWait, cfg.MaxDeliver = time.Second, 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := bus.Open(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: 2, Instances: []string{"i"}, Expected: 2, Created: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	job := schema.Job{JobID: "r/0/i/0", RunID: "r", InstanceID: "i", Attempt: 1}
	if err := b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	dead := make(chan bus.DeadLetter, 1)
	go b.HandleDeadJobs(ctx, func(dl bus.DeadLetter) { dead <- dl }, nil)
	for range 3 { // two failed deliveries, then a poll that finds it exhausted
		batch, err := b.Consumer.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			msg.Nak()
		}
	}
	select {
	case <-dead:
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not dead-lettered")
	}

	flags := []string{"--nats", srv.ClientURL()}
	status := func() coordinator.FarmStatus {
		t.Helper()
		code, out, errOut := run(t, append([]string{"status", "--json", "--run", "r"}, flags...)...)
		if code != 0 {
			t.Fatalf("status exit %d: %s", code, errOut)
		}
		var st coordinator.FarmStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status output %q: %v", out, err)
		}
		return st
	}
	st := status()
	// One of two jobs is accounted for (as an infra_error) a minute after
	// the run began: about one per minute, about a minute to go.
	if len(st.Runs) != 1 || st.Runs[0].Dead != 1 || st.Runs[0].Accounted != 1 || st.Pending != 0 ||
		st.Runs[0].PerMinute < 0.9 || st.Runs[0].PerMinute > 1 || st.Runs[0].ETA < 55*time.Second || st.Runs[0].ETA > 65*time.Second {
		t.Fatalf("status before retry = %+v", st)
	}
	if code, _, errOut := run(t, append([]string{"jobs", "retry", "--run", "nope"}, flags...)...); code != exitError || !strings.Contains(errOut, `no run "nope"`) {
		t.Errorf("jobs retry of an unknown run: exit %d: %s", code, errOut)
	}
	code, out, errOut := run(t, append([]string{"jobs", "retry", "--run", "r"}, flags...)...)
	if code != 0 || !strings.Contains(out, "requeued 1 dead jobs") {
		t.Fatalf("jobs retry exit %d: %s %s", code, out, errOut)
	}
	// The server counts the requeued job a moment after accepting it.
	checkfor.Within(t, 5*time.Second, 20*time.Millisecond, func() error {
		if st = status(); st.Runs[0].Dead != 0 || st.Pending != 1 {
			return fmt.Errorf("status after retry = %+v", st)
		}
		return nil
	})
	batch, err := b.Consumer.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		got, err := bus.DecodeJob(msg)
		if err != nil || got.JobID != job.JobID || got.Attempt != 2 {
			t.Errorf("requeued job = %+v, %v", got, err)
		}
		if err := b.PublishTrajectory(ctx, schema.Trajectory{JobID: got.JobID, RunID: got.RunID, InstanceID: got.InstanceID,
			Attempt: got.Attempt, Status: schema.StatusOK}); err != nil {
			t.Fatal(err)
		}
		msg.Ack()
	}
	// The retry's trajectory answers the same job: still one of two.
	if st = status(); st.Runs[0].Accounted != 1 {
		t.Errorf("after the retried job answered, %d jobs accounted, want 1", st.Runs[0].Accounted)
	}
	if code, out, _ := run(t, append([]string{"status"}, flags...)...); code != 0 || !strings.Contains(out, "ETA") || !strings.Contains(out, "redelivered") {
		t.Errorf("table status exit %d:\n%s", code, out)
	}
	if code, _, _ := run(t, append([]string{"status", "--run", "nope"}, flags...)...); code == 0 {
		t.Error("status of an unknown run succeeded")
	}
	// status and jobs retry attach to the topology without resetting it.
	info, err := b.Consumer.Info(ctx)
	if err != nil || info.Config.MaxDeliver != 2 || info.Config.AckWait != time.Second {
		t.Errorf("the farm's consumer changed: %+v, %v", info.Config, err)
	}
}

// TestStatusShowsWhyJobsWereGivenUp: a job no worker could serve is dead
// with its reason, which status prints.
func TestStatusShowsWhyJobsWereGivenUp(t *testing.T) {
	srv := natstest.Server(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: 1, Instances: []string{"i"}, Expected: 1, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	const why = "worker w1 cannot serve the job's policy: model \"adapter-9\" has no endpoint here"
	job := schema.Job{JobID: "r/0/i/0", RunID: "r", InstanceID: "i", Attempt: 1,
		Policy: schema.Policy{Kind: "openai", Model: "adapter-9"}}
	if err := b.GiveUp(ctx, job, 1, why); err != nil {
		t.Fatal(err)
	}
	// A worker killed a minute ago still has an entry until it expires.
	hb, _ := json.Marshal(bus.Heartbeat{ID: "killed", Active: 4, Capacity: 4, Updated: time.Now().Add(-time.Minute)})
	if _, err := b.Workers.Put(ctx, "killed", hb); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "status", "--nats", srv.ClientURL())
	if code != 0 || !strings.Contains(out, "run r: 1 dead (requeue with `a2farm jobs retry`): "+why) || !strings.Contains(out, "silent") {
		t.Fatalf("status exit %d:\n%s%s", code, out, errOut)
	}
	code, out, _ = run(t, "status", "--json", "--nats", srv.ClientURL())
	var st coordinator.FarmStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Runs[0].DeadReasons[why] != 1 || st.Runs[0].Accounted != 1 ||
		len(st.Silent) != 1 || st.Silent[0] != "killed" {
		t.Fatalf("status --json: %s", out)
	}
}

// TestNATSPasswordsAreNeverPrinted: a password inside --nats does not
// come back in the error that a failed connection prints.
func TestNATSPasswordsAreNeverPrinted(t *testing.T) {
	port := natstest.FreePort(t) // nothing listens there
	code, out, errOut := run(t, "status", "--nats", fmt.Sprintf("nats://farm:hunter2-secret@127.0.0.1:%d", port))
	if code == 0 || strings.Contains(out+errOut, "hunter2-secret") || !strings.Contains(errOut, "REDACTED") {
		t.Errorf("exit %d, output %q %q", code, out, errOut)
	}
}

// TestStatusUntilWaitsOutALostServer: `status --until` outlives a server
// that stops and comes back (it asks again instead of failing), and an
// interrupt before the run is done exits 130.
func TestStatusUntilWaitsOutALostServer(t *testing.T) {
	port, store := natstest.FreePort(t), t.TempDir()
	start := func() *server.Server {
		s, err := embednats.Start(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: store, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv := start()
	defer func() { embednats.Stop(srv) }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: 1, Instances: []string{"i"}, Expected: 1, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr output
	code := make(chan int, 1)
	go func() {
		code <- Run(stop, nil, []string{"status", "--nats", srv.ClientURL(), "--run", "r", "--until", "answered", "--watch", "200ms"}, &stdout, &stderr)
	}()
	reports := func() int { return strings.Count(stdout.String(), "queue: ") }
	waitReports := func(n int) func() error {
		return func() error {
			if got := reports(); got < n {
				return fmt.Errorf("%d reports, want %d; stderr: %s", got, n, stderr.String())
			}
			return nil
		}
	}
	checkfor.Within(t, 10*time.Second, 50*time.Millisecond, waitReports(1))
	embednats.Stop(srv)
	// Down until a report has failed (the request times out).
	for !strings.Contains(stderr.String(), "no status from the farm") {
		select {
		case c := <-code:
			t.Fatalf("status ended while the server was down: exit %d\n%s", c, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	srv = start()
	before := reports()
	checkfor.Within(t, 20*time.Second, 50*time.Millisecond, waitReports(before+1))
	cancel()
	if c := <-code; c != exitInterrupted || !strings.Contains(stderr.String(), "interrupted; run r is not answered yet") {
		t.Errorf("status --until interrupted: exit %d, want %d\n%s", c, exitInterrupted, stderr.String())
	}
}

package learner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/checkfor"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

// openRun opens the topology on a fresh server and stores the manifest
// of run "r": one instance, i1, with the given samples.
func openRun(ctx context.Context, t *testing.T, samples int) *bus.Bus {
	t.Helper()
	_, js := natstest.New(t)
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: samples, Instances: []string{"i1"},
		Expected: samples, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	storeGold(ctx, t, b, gold)
	return b
}

// TestServeReplacesRetriedInfraError: a group closes with an infra_error
// in it; when the retried job's second attempt arrives, the archive keeps
// the success and the group's shard is written again with its rows.
func TestServeReplacesRetriedInfraError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := openRun(ctx, t, 2)
	type closing struct{ trajectories, rows int }
	closed := make(chan closing, 4)
	out := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServiceConfig{Bus: b, Out: out, Learner: DefaultConfig(), Log: zerolog.Nop(),
			OnGroupClosed: func(_ string, _ int64, _ string, trajectories, rows int) {
				closed <- closing{trajectories, rows}
			}})
	}()
	wait := func() closing {
		t.Helper()
		select {
		case c := <-closed:
			return c
		case <-time.After(15 * time.Second):
			t.Fatal("the group did not close")
			return closing{}
		}
	}

	failed := traj(1, schema.StatusInfraError, false, "read")
	failed.Turns, failed.Attempt = nil, 1
	for _, tr := range []schema.Trajectory{traj(0, schema.StatusOK, true, "read"), failed} {
		if err := b.PublishTrajectory(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	first := wait()
	retried := traj(1, schema.StatusOK, true, "read")
	retried.Attempt = 2
	if err := b.PublishTrajectory(ctx, retried); err != nil {
		t.Fatal(err)
	}
	second := wait()
	if first.trajectories != 2 || second.trajectories != 2 || second.rows <= first.rows {
		t.Errorf("closings: first %+v, after the retry %+v; want the retry's rows added", first, second)
	}
	trs, err := schema.ReadTrajectoryDir(filepath.Join(out, "archive", "r", "0", "i1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		if tr.Status != schema.StatusOK {
			t.Errorf("archived sample %d has status %s after the retry", tr.Sample, tr.Status)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "shards", "r", "0", "i1")); err != nil {
		t.Errorf("shards of the group: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeKeepsAttemptOrderWithinABatch: a failed first attempt and its
// successful retry land in the same fetched batch (both are published
// before the learner starts); archive entries are written in parallel,
// but the two attempts of one job are taken in order, so the success is
// what the archive keeps and the group closes once, complete.
func TestServeKeepsAttemptOrderWithinABatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const samples = 6
	b := openRun(ctx, t, samples)
	for s := range int64(samples) {
		failed := traj(s, schema.StatusInfraError, false, "read")
		failed.Turns, failed.Attempt = nil, 1
		retried := traj(s, schema.StatusOK, true, "read")
		retried.Attempt = 2
		for _, tr := range []schema.Trajectory{failed, retried} {
			if err := b.PublishTrajectory(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	closed := make(chan int, 4)
	out := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServiceConfig{Bus: b, Out: out, Learner: DefaultConfig(), Log: zerolog.Nop(),
			OnGroupClosed: func(_ string, _ int64, _ string, trajectories, _ int) { closed <- trajectories }})
	}()
	waitClosed(t, closed, samples)
	trs, err := schema.ReadTrajectoryDir(filepath.Join(out, "archive", "r", "0", "i1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		if tr.Status != schema.StatusOK || tr.Attempt != 2 {
			t.Errorf("archived sample %d: status %s, attempt %d; want the retry's success", tr.Sample, tr.Status, tr.Attempt)
		}
	}
	select {
	case n := <-closed:
		t.Errorf("the group closed a second time (%d trajectories)", n)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeRecoversADeliveryLostOnTheWire: a trajectory delivered to the
// learner's consumer but never received — the server the learner talks to
// stopped while answering its fetch, as the cluster test saw — comes
// again after the learner's ack wait, and its group closes then. With the
// minute-long wait the consumer had, the group waited a minute.
func TestServeRecoversADeliveryLostOnTheWire(t *testing.T) {
	ctx := context.Background()
	const samples = 2
	b := openRun(ctx, t, samples)
	for s := range int64(samples) {
		if err := b.PublishTrajectory(ctx, traj(s, schema.StatusOK, s == 0, "read")); err != nil {
			t.Fatal(err)
		}
	}
	// The lost delivery: fetched on the learner's consumer and dropped, the
	// pin let go as a learner's dying server would.
	cons, err := b.Traj.CreateOrUpdateConsumer(ctx, ServiceConfig{}.withDefaults().consumer())
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup(bus.LearnerGroup))
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for range batch.Messages() {
		lost++
	}
	if lost != 1 {
		t.Fatalf("fetched %d trajectories; want the one to lose", lost)
	}
	if err := b.Traj.UnpinConsumer(ctx, bus.LearnerConsumer, bus.LearnerGroup); err != nil {
		t.Fatal(err)
	}
	closed := make(chan int, 1)
	defer serveUntil(t, b, t.TempDir(), closed)()
	waitClosedWithin(t, closed, samples, 25*time.Second) // the ack wait (10 s) and time to spare
}

// serveUntil runs the learner on out until the returned stop is called,
// reporting each group it closes (its trajectory count) on closed.
func serveUntil(t *testing.T, b *bus.Bus, out string, closed chan<- int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServiceConfig{Bus: b, Out: out, Learner: DefaultConfig(), Log: zerolog.Nop(),
			OnGroupClosed: func(_ string, _ int64, _ string, trajectories, _ int) { closed <- trajectories }})
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// waitClosed waits for the next group closed, with want trajectories.
func waitClosed(t *testing.T, closed <-chan int, want int) {
	t.Helper()
	waitClosedWithin(t, closed, want, 15*time.Second)
}

func waitClosedWithin(t *testing.T, closed <-chan int, want int, within time.Duration) {
	t.Helper()
	select {
	case n := <-closed:
		if n != want {
			t.Errorf("the group closed with %d trajectories; want %d", n, want)
		}
	case <-time.After(within):
		t.Fatalf("the group did not close within %s", within)
	}
}

func archivedFiles(t *testing.T, out string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(out, "archive", "r", "0", "i1", "*.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	return len(files)
}

// TestServeResumesAfterARestart: a learner stopped with half a group
// archived is restarted on the same folder; the group closes once, with
// every trajectory, and a second restart closes nothing again.
func TestServeResumesAfterARestart(t *testing.T) {
	ctx := context.Background()
	const samples = 4
	b := openRun(ctx, t, samples)
	out := t.TempDir()
	closed := make(chan int, 4)
	stop := serveUntil(t, b, out, closed)
	for s := range int64(2) {
		if err := b.PublishTrajectory(ctx, traj(s, schema.StatusOK, s == 0, "read")); err != nil {
			t.Fatal(err)
		}
	}
	checkfor.Within(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := archivedFiles(t, out); n < 2 {
			return fmt.Errorf("%d of the first two trajectories archived", n)
		}
		return nil
	})
	stop()

	stop = serveUntil(t, b, out, closed)
	for s := int64(2); s < samples; s++ {
		if err := b.PublishTrajectory(ctx, traj(s, schema.StatusOK, false, "read")); err != nil {
			t.Fatal(err)
		}
	}
	waitClosed(t, closed, samples)
	stop()
	if n := archivedFiles(t, out); n != samples {
		t.Errorf("%d archived trajectories; want %d", n, samples)
	}

	stop = serveUntil(t, b, out, closed)
	select {
	case n := <-closed:
		t.Errorf("a restart closed the finished group again (%d trajectories)", n)
	case <-time.After(500 * time.Millisecond):
	}
	stop()
}

// TestServeClosesGroupsArchivedBeforeAStop: the learner stopped after
// archiving a group's last trajectory but before writing its shard; no
// trajectory of that group will arrive again, so the restarted learner
// must close it from the archive.
func TestServeClosesGroupsArchivedBeforeAStop(t *testing.T) {
	ctx := context.Background()
	const samples = 3
	b := openRun(ctx, t, samples)
	out := t.TempDir()
	s := &service{cfg: ServiceConfig{Out: out}}
	for i := range int64(samples) {
		tr := traj(i, schema.StatusOK, i == 1, "read")
		rec := schema.EncodeTrajectories(nil, tr)
		err := atomicfile.Write(s.archivePath(tr), func(w io.Writer) error { return schema.WriteIPC(w, schema.TrajectorySchema(), rec) })
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan int, 2)
	stop := serveUntil(t, b, out, closed)
	waitClosed(t, closed, samples)
	stop()
	if _, err := os.Stat(filepath.Join(out, "shards", "r", "0", "i1", "manifest.json")); err != nil {
		t.Errorf("no shard manifest after the resumed close: %v", err)
	}
}

// TestSecondLearnerStandsBy: a second learner on the same farm receives
// nothing while the first runs — a group must not be split between two
// archives — and takes the log over once the first stops.
func TestSecondLearnerStandsBy(t *testing.T) {
	ctx := context.Background()
	const samples = 2
	b := openRun(ctx, t, samples)
	outA, outB := t.TempDir(), t.TempDir()
	closedA, closedB := make(chan int, 4), make(chan int, 4)
	learnerState := func() bus.LearnerState {
		t.Helper()
		st, err := b.Learner(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := learnerState(); st.Started || st.Active {
		t.Errorf("before any learner: %+v", st)
	}
	stopA := serveUntil(t, b, outA, closedA)
	publish := func(instance string) {
		t.Helper()
		if instance != "i1" { // an instance without usable gold, as the coordinator records it
			if err := b.PutGold(ctx, "r", 0, instance, nil); err != nil {
				t.Fatal(err)
			}
		}
		for s := range int64(samples) {
			tr := traj(s, schema.StatusOK, s == 0, "read")
			tr.InstanceID, tr.JobID = instance, schema.JobID("r", 0, instance, s)
			if err := b.PublishTrajectory(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("i1")
	waitClosed(t, closedA, samples) // A holds the log now
	if st := learnerState(); !st.Started || !st.Active || st.Since.IsZero() {
		t.Errorf("with a learner receiving: %+v", st)
	}
	stopB := serveUntil(t, b, outB, closedB)
	// Spread over a few seconds, so that both learners have pull requests
	// waiting when trajectories arrive: without the pin both would get some.
	const during = 12
	for i := range during {
		publish(fmt.Sprintf("during-%d", i))
		time.Sleep(200 * time.Millisecond)
	}
	for range during {
		waitClosed(t, closedA, samples)
	}
	stopA()
	publish("after")
	waitClosed(t, closedB, samples)
	stopB()
	if st := learnerState(); st.Active || st.Backlog != 0 || st.Unacked != 0 {
		t.Errorf("after both stopped cleanly: %+v", st)
	}
	for _, c := range []struct {
		out  string
		want int
	}{{outA, 1 + during}, {outB, 1}} {
		if dirs, _ := filepath.Glob(filepath.Join(c.out, "archive", "r", "0", "*")); len(dirs) != c.want {
			t.Errorf("%s archived %d groups; want %d", c.out, len(dirs), c.want)
		}
	}
}

// TestServeQuarantinesForeignMessages: garbage on a run's trajectory
// subject is moved to the dead letters and out of the log, and the group
// still closes with its real trajectories.
func TestServeQuarantinesForeignMessages(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.New(t)
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: 1, Instances: []string{"i1"},
		Expected: 1, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	storeGold(ctx, t, b, gold)
	for _, data := range []string{"garbage", "more garbage"} {
		if _, err := js.Publish(ctx, "a2farm.trajectories.r.0", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PublishTrajectory(ctx, traj(0, schema.StatusOK, true, "read")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan int, 1)
	stop := serveUntil(t, b, t.TempDir(), closed)
	defer stop()
	waitClosed(t, closed, 1)
	checkfor.Within(t, 5*time.Second, 20*time.Millisecond, func() error {
		n, err := b.Quarantined(ctx)
		info, ierr := b.Traj.Info(ctx)
		if err != nil || ierr != nil || n != 2 || info.State.Msgs != 1 {
			return fmt.Errorf("%d quarantined (%v), %d left in the log (%v); want 2 and 1", n, err, info.State.Msgs, ierr)
		}
		return nil
	})
}

// TestServeRetriesAnUnreadableManifest: a complete group whose run manifest
// cannot be read (here it is damaged; in a cluster, the runs bucket may
// be electing its leader while the trajectory log answers) is reported as
// failing and closes once the manifest reads again. Before, the learner
// dropped the error and the group waited for another trajectory, or for
// its deadline (30 min).
func TestServeRetriesAnUnreadableManifest(t *testing.T) {
	ctx := context.Background()
	const samples = 2
	b := openRun(ctx, t, samples)
	const key = "r.0" // where bus keeps run r's first iteration
	good, err := b.Runs.Get(ctx, key)
	if err != nil {
		t.Fatalf("the manifest of run r is not under %q: %v", key, err)
	}
	if _, err := b.Runs.Put(ctx, key, []byte("{damaged")); err != nil {
		t.Fatal(err)
	}
	for s := range int64(samples) {
		if err := b.PublishTrajectory(ctx, traj(s, schema.StatusOK, s == 0, "read")); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan int, 1)
	defer serveUntil(t, b, t.TempDir(), closed)()
	checkfor.Within(t, 10*time.Second, 50*time.Millisecond, func() error {
		r, err := b.GetLearnerReport(ctx)
		if err != nil || r == nil || len(r.Failing) != 1 || !strings.Contains(r.Failing[0].Error, "read the run's manifest") {
			return fmt.Errorf("the learner does not report the unreadable manifest: %+v, %v", r, err)
		}
		return nil
	})
	if _, err := b.Runs.Put(ctx, key, good.Value()); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, closed, samples)
}

// TestServeRetriesAFailedShard: a group whose shard cannot be written
// (the folder is blocked; later, the run's manifest — its gold — is
// missing) stays open, is reported as failing, and is written once the
// cause is gone, without a restart.
func TestServeRetriesAFailedShard(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.New(t)
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	blocker := filepath.Join(out, "shards", "r", "0", "i1")
	if err := os.MkdirAll(filepath.Dir(blocker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, []byte("a file where the shard folder goes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishTrajectory(ctx, traj(0, schema.StatusOK, true, "read")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan int, 1)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Serve(sctx, ServiceConfig{Bus: b, Out: out, Learner: DefaultConfig(), Log: zerolog.Nop(),
			GroupDeadline: 500 * time.Millisecond,
			OnGroupClosed: func(_ string, _ int64, _ string, n, _ int) { closed <- n }})
	}()
	defer func() { cancel(); <-done }()
	failing := func(want string) {
		t.Helper()
		checkfor.Within(t, 10*time.Second, 50*time.Millisecond, func() error {
			r, err := b.GetLearnerReport(ctx)
			if err != nil || r == nil || len(r.Failing) != 1 || !strings.Contains(r.Failing[0].Error, want) {
				return fmt.Errorf("the learner does not report the failing shard (%q): %+v, %v", want, r, err)
			}
			return nil
		})
	}
	failing("no gold for the group") // no manifest yet
	if err := b.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: 1, Instances: []string{"i1"}, Expected: 1,
		Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	storeGold(ctx, t, b, gold)
	failing("not a directory") // now the blocked folder
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, closed, 1)
	if _, err := os.Stat(filepath.Join(blocker, "manifest.json")); err != nil {
		t.Errorf("no shard after the retry: %v", err)
	}
	checkfor.Within(t, 10*time.Second, 50*time.Millisecond, func() error {
		r, _ := b.GetLearnerReport(ctx)
		if r == nil || len(r.Failing) != 0 || r.Runs[bus.RunShardsKey("r", 0)].Sharded != 1 {
			return fmt.Errorf("the report still shows a failure: %+v", r)
		}
		return nil
	})
}

// storeGold stores each instance's gold for run "r", as a coordinator does.
func storeGold(ctx context.Context, tb testing.TB, b *bus.Bus, gold map[string]schema.Locations) {
	tb.Helper()
	for id, g := range gold {
		if err := b.PutGold(ctx, "r", 0, id, &g); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestServeRefusesBadHyperparametersAtOnce: a bad discovery mode fails
// before the learner reads anything, not at each group close.
func TestServeRefusesBadHyperparametersAtOnce(t *testing.T) {
	ctx := context.Background()
	b := openRun(ctx, t, 1)
	cfg := DefaultConfig()
	cfg.Rewards.Discovery = "psychic"
	err := Serve(ctx, ServiceConfig{Bus: b, Out: t.TempDir(), Learner: cfg, Log: zerolog.Nop()})
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Serve with a bad discovery mode: %v", err)
	}
}

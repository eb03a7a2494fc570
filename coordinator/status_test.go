package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
)

// TestStatusAgainstAClock: with the clock passed in, a run published two
// minutes ago with half its jobs answered shows one trajectory a minute
// and two minutes to go, and a worker whose heartbeat stopped being
// renewed is listed as silent while one that beat just now is not.
func TestStatusAgainstAClock(t *testing.T) {
	ctx, _, b, cfg := testRun(t)
	pub, err := Publish(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := pub.Manifest
	for _, inst := range cfg.Instances[:1] {
		for s := range int64(2) {
			answer(t, ctx, b, cfg.Spec.Job(cfg.RunID, 0, inst, s))
		}
	}
	now := m.Created.Add(2 * time.Minute)
	every := max(time.Second, b.HeartbeatTTL()/3)
	for id, beat := range map[string]time.Time{"fresh": now, "stale": now.Add(-3*every - time.Second)} {
		data, _ := json.Marshal(bus.Heartbeat{ID: id, Updated: beat})
		if _, err := b.Workers.Put(ctx, id, data); err != nil {
			t.Fatal(err)
		}
	}
	st, err := Status(ctx, b, cfg.RunID, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != 1 {
		t.Fatalf("runs = %+v", st.Runs)
	}
	r := st.Runs[0]
	if r.Expected != 4 || r.Accounted != 2 || r.PerMinute != 1 || r.ETA != 2*time.Minute {
		t.Errorf("run status = %+v; want 2 of 4 accounted, 1 a minute, ETA 2m", r)
	}
	if len(st.Silent) != 1 || st.Silent[0] != "stale" || len(st.Workers) != 2 {
		t.Errorf("silent %v of workers %+v; want only stale", st.Silent, st.Workers)
	}
	if !st.At.Equal(now) {
		t.Errorf("status at %s, want the clock's %s", st.At, now)
	}
	if _, err := Status(ctx, b, "nope", now); err == nil {
		t.Error("status of an unknown run did not fail")
	}

	// Finished, the run's rate is over its own duration: asking later
	// does not lower it.
	for _, inst := range cfg.Instances[1:2] {
		for s := range int64(2) {
			answer(t, ctx, b, cfg.Spec.Job(cfg.RunID, 0, inst, s))
		}
	}
	var rates []float64
	for _, later := range []time.Duration{10 * time.Minute, 3 * time.Hour} {
		st, err := Status(ctx, b, cfg.RunID, m.Created.Add(later))
		if err != nil {
			t.Fatal(err)
		}
		rates = append(rates, st.Runs[0].PerMinute)
		if r := st.Runs[0]; r.Accounted != 4 || r.ETA != 0 {
			t.Errorf("finished run = %+v", r)
		}
	}
	if rates[0] != rates[1] || rates[0] <= 4.0/10 {
		t.Errorf("a finished run's rate asked 10 minutes and 3 hours after it began: %v; want the same, over its own duration", rates)
	}
}

package learner

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

// BenchmarkServeLag publishes 200 instances × 8 trajectories of 10 turns
// as fast as the bus takes them, with the streaming learner running, and
// measures its lag: from the publish of a group's last trajectory to the
// group's shard being written.
func BenchmarkServeLag(b *testing.B) {
	const instances, samples = 200, 8
	trs, gold := synthetic(instances, samples, 10)
	var lags []time.Duration
	var wall time.Duration
	for range b.N {
		_, js := natstest.New(b)
		ctx, cancel := context.WithCancel(context.Background())
		bs, err := bus.Open(ctx, js, bus.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		if err := bs.PutRun(ctx, &schema.RunManifest{RunID: "r", Samples: samples, Expected: instances * samples,
			Created: time.Now()}); err != nil {
			b.Fatal(err)
		}
		storeGold(ctx, b, bs, gold)
		var mu sync.Mutex
		lastPublished := map[string]time.Time{}
		closed := make(chan time.Duration, instances)
		done := make(chan error, 1)
		go func() {
			done <- Serve(ctx, ServiceConfig{Bus: bs, Out: b.TempDir(), Learner: DefaultConfig(), Log: zerolog.Nop(),
				OnGroupClosed: func(_ string, _ int64, inst string, _, _ int) {
					mu.Lock()
					closed <- time.Since(lastPublished[inst])
					mu.Unlock()
				}})
		}()
		start := time.Now()
		for _, tr := range trs {
			tr.RunID = "r"
			if err := bs.PublishTrajectory(ctx, tr); err != nil {
				b.Fatal(err)
			}
			if tr.Sample == samples-1 {
				mu.Lock()
				lastPublished[tr.InstanceID] = time.Now()
				mu.Unlock()
			}
		}
		for range instances {
			select {
			case lag := <-closed:
				lags = append(lags, lag)
			case <-time.After(time.Minute):
				b.Fatal("the learner fell a minute behind")
			}
		}
		wall += time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lags)
	b.ReportMetric(float64(instances*samples*b.N)/wall.Seconds(), "trajectories/s")
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1e3, "lag-p50-ms")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1e3, "lag-p99-ms")
}

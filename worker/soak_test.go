package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/repoindex"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/schema"
)

// TestSoakWorkerMemory runs thousands of jobs through one farm worker and
// checks that nothing grows with the number of jobs: after the last round
// the live Go heap plus tree-sitter's C heap may exceed the level after
// the warm-up rounds by at most soakSlack (1 KiB per job), and no
// goroutine may be left over. "keep none" closes and rebuilds the
// snapshot index for every job, which is where a leak of parsers, trees or
// search indexes (whose background goroutines outlive a missing Close)
// would show. The server runs in the process and keeps the id of every
// message published within its dedup window, so a little growth per job
// is the server's by design; the slack covers it. It runs under
// `make soak` (A2FARM_SOAK=1), not `make test`.
func TestSoakWorkerMemory(t *testing.T) {
	if os.Getenv("A2FARM_SOAK") == "" {
		t.Skip("set A2FARM_SOAK=1 (make soak)")
	}
	const (
		rounds, warmRounds = 25, 5
		soakSlack          = 4 << 20
	)
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	perRound := 200 / len(l.Instances) * len(l.Instances)
	for _, tc := range []struct {
		name string
		keep int
	}{{"keep default", 0}, {"keep none", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := natstest.New(t)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			b, err := bus.Open(ctx, js, bus.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			repos := gitrepo.NewSet(l.ReposDir)
			defer repos.Close()
			acked := make(chan struct{}, perRound)
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Config{Bus: b, Repos: repos, Index: repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})}, Policies: builtinPolicies(t), Concurrency: 8,
					KeepIndexes: tc.keep, WorkerID: "soak", Log: zerolog.Nop(), OnJobSettled: func(_, outcome string) {
						if outcome == "ack" {
							acked <- struct{}{}
						}
					}})
			}()
			var warm uint64
			var warmGoroutines int
			start := time.Now()
			for round := range rounds {
				for i := range perRound {
					inst := l.Instances[i%len(l.Instances)]
					s := int64(round*perRound + i)
					job := schema.Job{JobID: schema.JobID("soak", 0, inst.InstanceID, s), RunID: "soak",
						InstanceID: inst.InstanceID, Repo: inst.Repo, BaseCommit: inst.BaseCommit,
						ProblemStatement: inst.ProblemStatement, Sample: s, Sampling: schema.Sampling{Seed: schema.SampleSeed(1, s)}, Attempt: 1,
						Policy: schema.Policy{Kind: schema.PolicyHeuristic}}
					if err := b.PublishJob(ctx, job); err != nil {
						t.Fatal(err)
					}
				}
				for got := range perRound {
					select {
					case <-acked:
					case <-time.After(time.Minute):
						t.Fatalf("round %d: %d of %d jobs done after a minute", round, got, perRound)
					}
				}
				// The server runs in this process: drop the stored
				// trajectories so that only the worker's memory is measured.
				if err := b.Traj.Purge(ctx); err != nil {
					t.Fatal(err)
				}
				inUse, goroutines := liveMemory(), runtime.NumGoroutine()
				t.Logf("after %5d jobs: Go heap + C heap %6.1f MiB, RSS %6.1f MiB, %d goroutines", (round+1)*perRound,
					float64(inUse)/(1<<20), float64(residentBytes())/(1<<20), goroutines)
				if round == warmRounds-1 {
					warm, warmGoroutines = inUse, goroutines
				}
				if round < rounds-1 {
					continue
				}
				jobs := (rounds - warmRounds) * perRound
				if inUse > warm+soakSlack {
					t.Errorf("memory grew by %.1f MiB over %d jobs after warm-up (%.1f KiB per job); allowed %d MiB",
						float64(inUse-warm)/(1<<20), jobs, float64(inUse-warm)/1024/float64(jobs), soakSlack>>20)
				}
				// A few goroutines come and go with in-flight requests;
				// a leak grows with the jobs.
				if goroutines > warmGoroutines+16 {
					t.Errorf("goroutines grew from %d to %d over %d jobs", warmGoroutines, goroutines, jobs)
				}
			}
			t.Logf("%d jobs in %v", rounds*perRound, time.Since(start).Round(time.Millisecond))
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// liveMemory is the live Go heap after a collection plus the bytes
// tree-sitter holds on the C heap, which the Go runtime cannot see.
func liveMemory() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + python.CHeapInUse()
}

// residentBytes is the process's resident set size, for the log (0 where
// /proc is missing).
func residentBytes() uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident uint64
	if _, err := fmt.Sscan(string(data), &size, &resident); err != nil {
		return 0
	}
	return resident * uint64(os.Getpagesize())
}

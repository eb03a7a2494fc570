package iterate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// roundSteps plays the loop's steps against a model of the replicas: the
// versions each holds (Serve loads and retires), and what plays, trains
// and is evaluated at each moment. It fails the test's invariants as they
// break, not after the fact: a rollout with a version no replica holds, a
// version retired while a round plays it, two trainings at once, a
// training not continuing the newest adapter, more than K+2 versions
// loaded.
type roundSteps struct {
	t        *testing.T
	maxStale int
	delay    time.Duration // each rollout and training takes this long

	mu        sync.Mutex
	loaded    map[int]bool    // versions on the replicas
	playing   map[int]int     // rounds playing → acting version
	training  int             // round training, 0: none
	newest    int             // the newest adapter trained (−1: the base model)
	played    map[int][]int   // round → acting version of each finished rollout
	trained   map[int]int     // round → finished trainings
	overlaps  int             // rollouts that started while a round trained
	evaluated map[int]int     // round → version evaluated
	failTrain map[int]int     // round → tries that fail before one succeeds
	refuse    bool            // failing tries exit 2: the trainer refused its input
	onTrain   func(round int) // called as a training starts (a Ctrl-C there)
	trainInit map[int]int     // round → the version its training started from
}

func newRoundSteps(t *testing.T, maxStale int) *roundSteps {
	return &roundSteps{t: t, maxStale: maxStale, delay: 20 * time.Millisecond, loaded: map[int]bool{}, playing: map[int]int{},
		newest: -1, played: map[int][]int{}, trained: map[int]int{}, evaluated: map[int]int{}, failTrain: map[int]int{}, trainInit: map[int]int{}}
}

func (s *roundSteps) Serve(ctx context.Context, r int, a Adapter, older []Adapter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Version >= 0 { // the base model is the server's own, not an adapter
		s.loaded[a.Version] = true
	}
	for _, o := range older {
		for round, v := range s.playing {
			if v == o.Version {
				s.t.Errorf("serving round %d retires version %d while round %d plays it", r, o.Version, round)
			}
		}
		delete(s.loaded, o.Version)
	}
	if len(s.loaded) > s.maxStale+2 {
		s.t.Errorf("after serving version %d the replicas hold %d versions, over K+2 = %d", a.Version, len(s.loaded), s.maxStale+2)
	}
	return ctx.Err()
}

func (s *roundSteps) Rollout(ctx context.Context, r int, a Adapter) (RolloutResult, error) {
	s.mu.Lock()
	if a.Version >= 0 && !s.loaded[a.Version] {
		s.t.Errorf("round %d plays version %d, which no replica holds", r, a.Version)
	}
	s.playing[r] = a.Version
	if s.training != 0 {
		s.overlaps++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.playing, r)
		s.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return RolloutResult{}, ctx.Err()
	case <-time.After(s.delay):
	}
	s.mu.Lock()
	s.played[r] = append(s.played[r], a.Version)
	s.mu.Unlock()
	return RolloutResult{Jobs: r, Rows: 10 + r}, nil
}

func (s *roundSteps) Train(ctx context.Context, r int, init Adapter, rollout RolloutResult) (TrainResult, error) {
	s.mu.Lock()
	if s.training != 0 {
		s.t.Errorf("round %d trains while round %d does", r, s.training)
	}
	if init.Version != s.newest {
		s.t.Errorf("round %d trains from version %d, not the newest, %d", r, init.Version, s.newest)
	}
	if rollout.Jobs != r {
		s.t.Errorf("round %d trains on the rollout of round %d", r, rollout.Jobs)
	}
	s.training = r
	s.trainInit[r] = init.Version
	fail := s.failTrain[r] > 0
	if fail {
		s.failTrain[r]--
	}
	onTrain := s.onTrain
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.training = 0
		s.mu.Unlock()
	}()
	if onTrain != nil {
		onTrain(r)
	}
	select {
	case <-ctx.Done():
		return TrainResult{}, ctx.Err()
	case <-time.After(s.delay):
	}
	if fail && s.refuse {
		return TrainResult{}, &TrainerExit{Code: 2, Line: "a2farm-train"}
	}
	if fail {
		return TrainResult{}, &TrainerExit{Code: 137, Line: "a2farm-train"}
	}
	s.mu.Lock()
	s.trained[r]++
	s.newest = r
	s.mu.Unlock()
	return TrainResult{Steps: 1, Adapter: fmt.Sprintf("adapters/it%d", r)}, nil
}

func (s *roundSteps) Evaluate(ctx context.Context, r int, a Adapter) (EvalResult, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Version >= 0 && !s.loaded[a.Version] {
		s.t.Errorf("version %d is evaluated while no replica holds it", a.Version)
	}
	s.evaluated[r] = a.Version
	return EvalResult{Instances: r}, true, ctx.Err()
}

// TestRoundsKeepEveryRowWithinTheBound: with each bound, every round plays
// once and trains once, in order, each continuing the newest adapter; no
// row is trained over the bound; the adapter after each pass is
// evaluated; a bound of 1 or more overlaps rollouts with training, and 0
// plays in turn.
func TestRoundsKeepEveryRowWithinTheBound(t *testing.T) {
	for _, k := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("max-staleness %d", k), func(t *testing.T) {
			steps := newRoundSteps(t, k)
			var events []Event
			rows, stats, err := RunRounds(context.Background(), RoundsConfig{Dir: t.TempDir(), Rounds: 8, PerPass: 4, MaxStaleness: k,
				Plan: 1, Steps: steps, OnEvent: func(e Event) { events = append(events, e) }})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 8 {
				t.Fatalf("%d rows, want 8", len(rows))
			}
			rowsTrained := 0
			for i, row := range rows {
				r := i + 1
				if row.Iteration != r || len(steps.played[r]) != 1 || steps.trained[r] != 1 {
					t.Errorf("round %d (row %d): played %v, trained %d times", r, row.Iteration, steps.played[r], steps.trained[r])
				}
				if row.Acting == nil || *row.Acting != steps.played[r][0] || row.Staleness == nil {
					t.Fatalf("round %d: the row's acting version %v, staleness %v; it played with %v", r, row.Acting, row.Staleness, steps.played[r])
				}
				if want := r - 1 - max(*row.Acting, 0); *row.Staleness != want || want > k {
					t.Errorf("round %d, played by %d: staleness %d, want %d within %d", r, *row.Acting, *row.Staleness, want, k)
				}
				if steps.trainInit[r] != r-1 && !(r == 1 && steps.trainInit[r] == -1) {
					t.Errorf("round %d trained from %d", r, steps.trainInit[r])
				}
				rowsTrained += 10 + r
			}
			if stats.RowsTrained() != rowsTrained || stats.MaxSeen() > k || stats.Dropped != 0 {
				t.Errorf("stats %+v: want %d rows trained, none over %d", stats, rowsTrained, k)
			}
			if want := map[int]int{4: 4, 8: 8}; !maps.Equal(steps.evaluated, want) {
				t.Errorf("evaluated %v, want %v (round → version)", steps.evaluated, want)
			}
			switch {
			case k == 0 && (steps.overlaps != 0 || stats.MaxInFlight != 1):
				t.Errorf("the synchronous loop overlapped: %d rollouts beside a training, %d rounds at once", steps.overlaps, stats.MaxInFlight)
			case k > 0 && (steps.overlaps == 0 || stats.MaxInFlight != k+1):
				t.Errorf("bound %d: %d rollouts beside a training, %d rounds at once (want some, and %d)", k, steps.overlaps, stats.MaxInFlight, k+1)
			}
			if k == 0 && stats.MaxSeen() != 0 {
				t.Errorf("the synchronous loop trained at staleness %d", stats.MaxSeen())
			}
			if k > 0 && stats.MaxSeen() != k {
				t.Errorf("bound %d: the largest staleness trained is %d; the loop publishes as early as the bound allows", k, stats.MaxSeen())
			}
			if stats.TrainerIdle <= 0 || stats.Seconds <= 0 {
				t.Errorf("idle and wall time not counted: %+v", stats)
			}
			started := 0
			for _, e := range events {
				if e.Step == StepRollout && !e.Finished && e.Err == nil {
					started++
				}
			}
			if started != 8 {
				t.Errorf("%d rollouts started, want 8", started)
			}
		})
	}
}

// TestRoundsResumeWithoutReplayingOrRetraining: a Ctrl-C with rounds in
// flight, then --resume: a finished round is neither played nor trained
// again, and a round published before the stop plays with the adapter it
// was published with.
func TestRoundsResumeWithoutReplayingOrRetraining(t *testing.T) {
	for _, stopAt := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("stop as round %d trains", stopAt), func(t *testing.T) {
			dir := t.TempDir()
			steps := newRoundSteps(t, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			steps.onTrain = func(r int) {
				if r == stopAt {
					cancel()
				}
			}
			cfg := RoundsConfig{Dir: dir, Rounds: 6, PerPass: 3, MaxStaleness: 1, Plan: 1, Steps: steps}
			if _, _, err := RunRounds(ctx, cfg); !errors.Is(err, context.Canceled) {
				t.Fatalf("stopped: %v, want the context's error", err)
			}
			st, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			publishedWith := map[int]int{}
			for _, row := range st.Rows {
				if row.Acting != nil {
					publishedWith[row.Iteration] = *row.Acting
				}
			}
			// What status --iterate shows of the stopped loop: the rounds
			// published and not finished, each with its version.
			var want []RoundPlaying
			for r := 1; r <= 6; r++ {
				if v, ok := publishedWith[r]; ok && !st.done(r, StepRollout) {
					want = append(want, RoundPlaying{Round: r, Acting: v})
				}
			}
			if got := st.Status(); !slices.Equal(got.Playing, want) || got.Trained != stopAt-1 || got.Async == nil {
				t.Errorf("status %+v, want playing %v and %d rounds trained", got, want, stopAt-1)
			}
			finished := func() map[int]int {
				out := map[int]int{}
				for r, p := range steps.played {
					out[r] = len(p)
				}
				return out
			}
			playedBefore, trainedBefore := finished(), len(steps.trained)
			steps.onTrain = nil
			cfg.Resume = true
			rows, _, err := RunRounds(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for r := 1; r <= 6; r++ {
				if len(steps.played[r]) != 1 || steps.trained[r] != 1 {
					t.Errorf("round %d: played %v, trained %d times (before the stop: %d played, %d trained)", r, steps.played[r], steps.trained[r], playedBefore[r], trainedBefore)
				}
				if v, ok := publishedWith[r]; ok && steps.played[r][0] != v {
					t.Errorf("round %d was published with version %d and played with %d after the resume", r, v, steps.played[r][0])
				}
			}
			if len(rows) != 6 || rows[5].Eval == nil || rows[2].Eval == nil {
				t.Errorf("rows %+v: want 6, the third and sixth evaluated", rows)
			}
		})
	}
}

// TestATrainerThatDiesIsRestarted: a training that fails is run again
// while the rounds play on; with no try left it stops the loop, naming the
// round, and a resume finishes it.
func TestATrainerThatDiesIsRestarted(t *testing.T) {
	steps := newRoundSteps(t, 1)
	steps.failTrain[2] = 1
	var retried []int
	rows, _, err := RunRounds(context.Background(), RoundsConfig{Dir: t.TempDir(), Rounds: 4, PerPass: 4, MaxStaleness: 1, Plan: 1,
		Steps: steps, TrainTries: 2, OnEvent: func(e Event) {
			if e.Retry {
				retried = append(retried, e.Round)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(retried, []int{2}) || steps.trained[2] != 1 || len(rows) != 4 || rows[3].Eval == nil {
		t.Errorf("retried %v, round 2 trained %d times, rows %d", retried, steps.trained[2], len(rows))
	}

	dir := t.TempDir()
	steps = newRoundSteps(t, 1)
	steps.failTrain[2] = 2
	cfg := RoundsConfig{Dir: dir, Rounds: 4, PerPass: 4, MaxStaleness: 1, Plan: 1, Steps: steps, TrainTries: 2}
	_, _, err = RunRounds(context.Background(), cfg)
	var se *StepError
	if !errors.As(err, &se) || se.Iteration != 2 || se.Step != StepTrain {
		t.Fatalf("two failed tries of two: %v, want a StepError of round 2's training", err)
	}
	cfg.Resume = true
	if _, _, err := RunRounds(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for r := 1; r <= 4; r++ {
		if steps.trained[r] != 1 || len(steps.played[r]) != 1 {
			t.Errorf("round %d: trained %d times, played %v", r, steps.trained[r], steps.played[r])
		}
	}

	// A trainer that refused its input (exit 2) would refuse it again: it
	// is not run again.
	steps = newRoundSteps(t, 1)
	steps.failTrain[1], steps.refuse = 1, true
	retried = nil
	_, _, err = RunRounds(context.Background(), RoundsConfig{Dir: t.TempDir(), Rounds: 2, PerPass: 2, MaxStaleness: 1, Plan: 1,
		Steps: steps, TrainTries: 3, OnEvent: func(e Event) {
			if e.Retry {
				retried = append(retried, e.Round)
			}
		}})
	if !errors.As(err, &se) || se.Iteration != 1 || len(retried) != 0 {
		t.Errorf("a refused input: %v, retried %v; want round 1's training to stop the loop at once", err, retried)
	}
}

// TestALowerBoundOnResumeDropsStaleRounds: rounds published under
// --max-staleness 2 and resumed under 0 are not trained where their rows
// would be over the new bound; they are counted as dropped, and no row
// over 0 is trained.
func TestALowerBoundOnResumeDropsStaleRounds(t *testing.T) {
	dir := t.TempDir()
	steps := newRoundSteps(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps.onTrain = func(r int) {
		if r == 2 {
			cancel()
		}
	}
	cfg := RoundsConfig{Dir: dir, Rounds: 6, PerPass: 6, MaxStaleness: 2, Plan: 1, Steps: steps}
	if _, _, err := RunRounds(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped: %v", err)
	}
	steps.onTrain = nil
	steps.maxStale = 2 // versions loaded under the old bound stay until retired
	cfg.Resume, cfg.MaxStaleness = true, 0
	rows, stats, err := RunRounds(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds 2 and 3 were published with the base model before adapter 1
	// existed (staleness 1 once it does); round 4 with adapter 1, and rounds
	// 2 and 3 trained nothing since, so it trains at staleness 0.
	for _, row := range rows[1:3] {
		if row.Train == nil || row.Train.Skipped == "" || row.Staleness != nil {
			t.Errorf("round %d: trained %+v at staleness %v; want it dropped", row.Iteration, row.Train, row.Staleness)
		}
	}
	if rows[3].Train.Skipped != "" || *rows[3].Staleness != 0 || steps.trainInit[4] != 1 {
		t.Errorf("round 4: %+v at staleness %v from version %d", rows[3].Train, rows[3].Staleness, steps.trainInit[4])
	}
	if stats.MaxSeen() != 0 || stats.Dropped != (10+2)+(10+3) {
		t.Errorf("stats %+v: want nothing over 0 trained, rounds 2 and 3's rows dropped", stats)
	}
}

// TestAWarmupComesFirstInRounds: with a warm-up, round 0 (the teacher's
// rollout and adapter 0's training) runs first, in turn; adapter 0 is
// served and plays the first rounds, and the rounds' staleness counts from
// it.
func TestAWarmupComesFirstInRounds(t *testing.T) {
	steps := newRoundSteps(t, 1)
	var rowsSeen []int
	rows, stats, err := RunRounds(context.Background(), RoundsConfig{Dir: t.TempDir(), Rounds: 3, PerPass: 3, MaxStaleness: 1,
		Warmup: true, Plan: 1, Steps: steps, OnRow: func(r Row) { rowsSeen = append(rowsSeen, r.Iteration) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0].Iteration != 0 || rows[0].Train == nil || rows[0].Acting != nil {
		t.Fatalf("rows %+v: want the warm-up's first, then 3 rounds", rows)
	}
	if steps.trainInit[0] != Base.Version || steps.trainInit[1] != 0 {
		t.Errorf("adapter 0 trained from %d, round 1 from %d; want the base model and adapter 0", steps.trainInit[0], steps.trainInit[1])
	}
	for _, r := range rows[1:3] {
		if *r.Acting != 0 {
			t.Errorf("round %d played by version %d, want adapter 0", r.Iteration, *r.Acting)
		}
	}
	if stats.MaxSeen() != 1 || !slices.Contains(rowsSeen, 0) || len(rowsSeen) != 4 {
		t.Errorf("largest staleness %d (want 1); rows told %v", stats.MaxSeen(), rowsSeen)
	}
}

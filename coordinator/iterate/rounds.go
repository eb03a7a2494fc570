package iterate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Asynchronous iterations. The training set is played in rounds of a fixed
// number of instances; round r is trained into the adapter of version r,
// continuing the newest adapter, while later rounds play. A round is
// published with the newest adapter served on every replica (all samples
// of an instance by one version, so a group stays one policy), and only
// once its rows would be trained at a staleness of at most MaxStaleness:
// the number of adapters trained between the one that played the rows and
// the one they are trained into. MaxStaleness 0 plays the rounds in turn.
//
// One goroutine, the loop, owns the state: steps run in goroutines of their
// own and hand their results back to it, and it records each finished step
// before it starts what that step unblocked. At most one round trains (the
// adapters form a chain), any number may play, and an evaluation runs
// beside them.

// RoundsConfig configures RunRounds.
type RoundsConfig struct {
	// Dir holds the state file.
	Dir string
	// Rounds is how many rounds are played in all; PerPass of them make one
	// pass over the training set, and the adapter after each pass is
	// evaluated.
	Rounds, PerPass int
	// MaxStaleness bounds the staleness of every row trained. It may change
	// on resume: a round in flight whose rows a lower bound no longer
	// allows is not trained.
	MaxStaleness int
	// Warmup plays round 0 first, in turn: the teacher's rollout and the
	// training of adapter 0.
	Warmup bool
	// Plan and Resume are Config's.
	Plan   any
	Resume bool
	// Initial is the adapter the policy starts from; the zero Adapter is
	// Base.
	Initial Adapter
	Steps   Steps
	// TrainTries is how many times a round's training is run before its
	// failure stops the loop (the trainer resumes from the checkpoint the
	// failed try left); at least 1. A trainer that refused its input
	// (TrainerExit.Refused) is not run again.
	TrainTries int
	// OnEvent is told when a step starts and ends.
	OnEvent func(Event)
	// OnRow is told each round's row when its last step finished.
	OnRow func(Row)
	// now is the clock (tests).
	now func() time.Time
}

// Event is a step of a round that starts or ends.
type Event struct {
	Round    int
	Step     Step
	Finished bool
	// Err is the step's error when it ended without finishing; a training
	// try that failed while tries are left has Retry set.
	Err   error
	Retry bool
	// Adapter is the one the step works with: the acting adapter of a
	// rollout, the starting adapter of a training, the adapter served or
	// evaluated.
	Adapter Adapter
	// InFlight counts the rounds playing once the event is handled.
	InFlight int
}

// AsyncStats is what the loop says of its overlap.
type AsyncStats struct {
	MaxStaleness int `json:"max_staleness"`
	// RowsByStaleness counts the rows trained at each staleness; Dropped
	// counts the rows of rounds not trained because they were over the
	// bound.
	RowsByStaleness map[int]int `json:"rows_by_staleness"`
	Dropped         int         `json:"dropped_rows,omitempty"`
	// TrainerIdle is the time no round trained while some were left to
	// train; RolloutIdle the time no round played while some were left to
	// publish. Seconds is the loop's wall time. All add up over resumes.
	TrainerIdle float64 `json:"trainer_idle_seconds"`
	RolloutIdle float64 `json:"rollout_idle_seconds"`
	Seconds     float64 `json:"seconds"`
	// MaxInFlight is the most rounds that played at once.
	MaxInFlight int `json:"max_in_flight"`
}

// RowsTrained sums RowsByStaleness.
func (s *AsyncStats) RowsTrained() int {
	n := 0
	for _, c := range s.RowsByStaleness {
		n += c
	}
	return n
}

// MaxSeen is the largest staleness a trained row had (−1: none trained).
func (s *AsyncStats) MaxSeen() int {
	m := -1
	for k := range s.RowsByStaleness {
		m = max(m, k)
	}
	return m
}

// String says the overlap in one line: the rows trained by staleness, the
// rows dropped, each side's idle time, the most rounds at once.
func (s *AsyncStats) String() string {
	var hist []string
	for k := range s.MaxSeen() + 1 {
		hist = append(hist, fmt.Sprintf("%d: %d", k, s.RowsByStaleness[k]))
	}
	dropped := ""
	if s.Dropped > 0 {
		dropped = fmt.Sprintf(", %d rows dropped over the bound", s.Dropped)
	}
	return fmt.Sprintf("rows trained by staleness (bound %d): {%s}%s; trainer idle %.1f s, rollouts idle %.1f s of %.1f s; at most %d rounds playing at once",
		s.MaxStaleness, strings.Join(hist, ", "), dropped, s.TrainerIdle, s.RolloutIdle, s.Seconds, s.MaxInFlight)
}

// RunRounds runs the rounds the state does not record as finished and
// returns every round's row with the loop's stats.
func RunRounds(ctx context.Context, cfg RoundsConfig) ([]Row, *AsyncStats, error) {
	switch {
	case cfg.Rounds < 1 || cfg.PerPass < 1:
		return nil, nil, fmt.Errorf("rounds %d of %d per pass: want 1 or more", cfg.Rounds, cfg.PerPass)
	case cfg.MaxStaleness < 0:
		return nil, nil, fmt.Errorf("max staleness %d: want 0 or more", cfg.MaxStaleness)
	}
	cfg.TrainTries = max(cfg.TrainTries, 1)
	if cfg.Initial == (Adapter{}) {
		cfg.Initial = Base
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	st, path, err := openState(cfg.Dir, cfg.Plan, cfg.Resume)
	if err != nil {
		return nil, nil, err
	}
	if st.Async == nil {
		st.Async = &AsyncStats{RowsByStaleness: map[int]int{}}
	}
	st.Async.MaxStaleness = cfg.MaxStaleness
	l := &roundsLoop{cfg: cfg, st: st, path: path, results: make(chan stepResult), playing: map[int]Adapter{}}
	err = l.run(ctx)
	return st.sortedRows(), st.Async, err
}

// stepResult is a step that ended, handed back to the loop.
type stepResult struct {
	round   int
	step    Step
	adapter Adapter
	started time.Time
	err     error
	// record stores the step's result in the state (run by the loop).
	record func(*Row)
}

type roundsLoop struct {
	cfg     RoundsConfig
	st      *State
	path    string
	results chan stepResult

	playing    map[int]Adapter // rounds in flight, by the adapter that plays them
	training   bool            // a round trains
	serving    bool            // an adapter is being loaded on the replicas
	evaluating int             // the round whose adapter is evaluated, 0: none
	tries      int             // failed tries of the round training
	running    int             // goroutines not yet handed back
	failed     error           // the first step that failed: nothing new starts
}

func (l *roundsLoop) run(ctx context.Context) (err error) {
	st, cfg := l.st, l.cfg
	began := cfg.now()
	defer func() {
		st.Async.Seconds += cfg.now().Sub(began).Seconds()
		if serr := save(l.path, st); serr != nil && err == nil {
			err = serr
		}
	}()
	if cfg.Warmup { // round 0 plays and trains in turn, before anything is served
		for _, step := range []Step{StepRollout, StepTrain} {
			if st.done(0, step) {
				continue
			}
			l.event(Event{Round: 0, Step: step})
			start := cfg.now()
			if err := runStep(ctx, cfg.Steps, 0, step, st, cfg.Initial); err != nil {
				l.event(Event{Round: 0, Step: step, Err: err})
				return &StepError{Iteration: 0, Step: step, Err: err}
			}
			if err := l.finish(0, step, start); err != nil {
				return err
			}
			if step == StepTrain && cfg.OnRow != nil {
				cfg.OnRow(*st.row(0))
			}
		}
	}

	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	idleFrom := cfg.now()
	for {
		if l.failed == nil && ctx.Err() == nil {
			if err := l.startWhatMay(stepCtx); err != nil {
				l.failed = err
			}
		}
		if l.running == 0 {
			break
		}
		res := <-l.results
		now := cfg.now()
		l.countIdle(now.Sub(idleFrom).Seconds())
		idleFrom = now
		l.running--
		if err := l.handle(res, ctx.Err() == nil); err != nil && l.failed == nil {
			l.failed = err
			cancel() // the others stop; their results are not recorded
		}
	}
	if l.failed != nil {
		return l.failed
	}
	return ctx.Err()
}

// startWhatMay starts every step the state allows: the serving of the
// starting adapter, the training of the next round, the serving of the
// adapter last trained, the rounds the bound allows, the evaluation of a
// finished pass. A round trains while the adapter before it is being
// served: training needs only its files.
func (l *roundsLoop) startWhatMay(ctx context.Context) error {
	st, cfg := l.st, l.cfg
	if !st.done(0, StepServe) {
		if !l.serving {
			l.serve(ctx, 0, st.adapterAfter(0, cfg.Initial))
		}
		return nil // nothing plays before the first adapter is served
	}
	served, trained := l.servedThrough(), l.trainedThrough()
	if next := trained + 1; !l.training && next <= cfg.Rounds && st.done(next, StepRollout) {
		l.train(ctx, next)
	}
	if next := served + 1; !l.serving && next <= trained {
		l.serve(ctx, next, st.adapterAfter(next, cfg.Initial))
	}
	for r := 1; r <= cfg.Rounds; r++ {
		row := st.findRow(r)
		if _, ok := l.playing[r]; ok || st.done(r, StepRollout) {
			continue
		}
		if row != nil && row.Acting != nil { // published before a stop: it finishes with its own adapter
			a, err := st.adapterOf(*row.Acting, cfg.Initial)
			if err != nil {
				return &StepError{Iteration: r, Step: StepRollout, Err: err}
			}
			l.play(ctx, r, a)
			continue
		}
		if r-1-served > cfg.MaxStaleness {
			break
		}
		a := st.adapterAfter(served, cfg.Initial)
		v := a.Version
		st.row(r).Acting = &v
		if err := save(l.path, st); err != nil {
			return err
		}
		l.play(ctx, r, a)
	}
	if l.evaluating == 0 {
		for r := cfg.PerPass; r <= min(served, cfg.Rounds); r += cfg.PerPass {
			if !st.done(r, StepEvaluate) {
				l.evaluate(ctx, r, st.adapterAfter(r, cfg.Initial))
				break
			}
		}
	}
	return nil
}

// through is the last round j such that every round up to j is ok.
func (l *roundsLoop) through(ok func(r int) bool) int {
	j := 0
	for j < l.cfg.Rounds && ok(j+1) {
		j++
	}
	return j
}

// servedThrough is the last round j such that every round up to j is
// trained and its adapter served: the newest adapter the replicas hold.
func (l *roundsLoop) servedThrough() int {
	return l.through(func(r int) bool { return l.st.done(r, StepTrain) && l.st.done(r, StepServe) })
}

// trainedThrough is the last round j such that every round up to j is
// trained.
func (l *roundsLoop) trainedThrough() int {
	return l.through(func(r int) bool { return l.st.done(r, StepTrain) })
}

func (l *roundsLoop) play(ctx context.Context, r int, a Adapter) {
	l.playing[r] = a
	l.st.Async.MaxInFlight = max(l.st.Async.MaxInFlight, len(l.playing))
	l.launch(ctx, r, StepRollout, a, func(ctx context.Context) (func(*Row), error) {
		res, err := l.cfg.Steps.Rollout(ctx, r, a)
		return func(row *Row) { row.Rollout = &res }, err
	})
}

// train trains round r into adapter r from the newest adapter, unless its
// rows would be over the bound.
func (l *roundsLoop) train(ctx context.Context, r int) {
	st := l.st
	l.training = true
	init := st.adapterAfter(r-1, l.cfg.Initial)
	row := st.row(r)
	rollout, acting := *row.Rollout, *row.Acting
	staleness := st.staleness(r, acting)
	l.launch(ctx, r, StepTrain, init, func(ctx context.Context) (func(*Row), error) {
		var res TrainResult
		var err error
		if staleness > l.cfg.MaxStaleness {
			res = TrainResult{Adapter: init.Path, Skipped: fmt.Sprintf("played by version %d: its rows would be trained at staleness %d, over --max-staleness %d", acting, staleness, l.cfg.MaxStaleness)}
		} else {
			res, err = l.cfg.Steps.Train(ctx, r, init, rollout)
		}
		return func(row *Row) {
			row.Train = &res
			if res.Skipped == "" {
				row.Staleness = &staleness
				st.Async.RowsByStaleness[staleness] += rollout.Rows
			} else if staleness > l.cfg.MaxStaleness {
				st.Async.Dropped += rollout.Rows
			}
		}, err
	})
}

// serve loads adapter a, the newest, on every replica and retires the
// versions older than the one it replaces that nothing plays or evaluates
// any more. The one it replaces stays: a round may have been published
// with it while a loaded.
func (l *roundsLoop) serve(ctx context.Context, r int, a Adapter) {
	st, initial := l.st, l.cfg.Initial
	l.serving = true
	replaced := st.adapterAfter(l.servedThrough(), initial)
	inUse := map[int]bool{a.Version: true, replaced.Version: true}
	for _, p := range l.playing {
		inUse[p.Version] = true
	}
	if l.evaluating != 0 {
		inUse[st.adapterAfter(l.evaluating, initial).Version] = true
	}
	var retire []Adapter
	for _, o := range st.versionsBefore(a.Version, initial) {
		if !inUse[o.Version] && !st.retired(o.Version) {
			retire = append(retire, o)
		}
	}
	l.launch(ctx, r, StepServe, a, func(ctx context.Context) (func(*Row), error) {
		if r > 0 && a.Version < r { // round r trained nothing: its newest adapter is served already
			return func(*Row) {}, nil
		}
		err := l.cfg.Steps.Serve(ctx, r, a, retire)
		return func(*Row) {
			for _, o := range retire {
				st.Retired = append(st.Retired, o.Version)
			}
		}, err
	})
}

func (l *roundsLoop) evaluate(ctx context.Context, r int, a Adapter) {
	l.evaluating = r
	l.launch(ctx, r, StepEvaluate, a, func(ctx context.Context) (func(*Row), error) {
		res, ok, err := l.cfg.Steps.Evaluate(ctx, r, a)
		return func(row *Row) {
			if ok {
				row.Eval = &res
			}
		}, err
	})
}

// launch runs a step in a goroutine of its own and hands its result back.
func (l *roundsLoop) launch(ctx context.Context, r int, step Step, a Adapter, do func(context.Context) (func(*Row), error)) {
	l.running++
	l.event(Event{Round: r, Step: step, Adapter: a})
	start := l.cfg.now()
	go func() {
		record, err := do(ctx)
		l.results <- stepResult{round: r, step: step, adapter: a, started: start, err: err, record: record}
	}()
}

// handle records a step that ended, or decides what its failure does
// (running: the loop was not stopped).
func (l *roundsLoop) handle(res stepResult, running bool) error {
	switch res.step {
	case StepRollout:
		delete(l.playing, res.round)
	case StepTrain:
		l.training = false
	case StepServe:
		l.serving = false
	case StepEvaluate:
		l.evaluating = 0
	}
	if res.err != nil {
		var exit *TrainerExit
		refused := errors.As(res.err, &exit) && exit.Refused()
		retry := res.step == StepTrain && l.tries+1 < l.cfg.TrainTries && l.failed == nil && running && !refused && !errors.Is(res.err, context.Canceled)
		l.event(Event{Round: res.round, Step: res.step, Adapter: res.adapter, Err: res.err, Retry: retry})
		if retry {
			l.tries++
			return nil
		}
		return &StepError{Iteration: res.round, Step: res.step, Err: res.err}
	}
	if l.failed != nil {
		return nil // stopping: a step that finished meanwhile runs again on resume
	}
	if res.step == StepTrain {
		l.tries = 0
	}
	if l.hasRow(res.round) {
		res.record(l.st.row(res.round))
	}
	if err := l.finish(res.round, res.step, res.started); err != nil {
		return err
	}
	if l.roundDone(res.round) && l.cfg.OnRow != nil {
		l.cfg.OnRow(*l.st.row(res.round))
	}
	return nil
}

// hasRow says whether round r has a report row: round 0 without a warm-up
// only serves the initial adapter, and has none.
func (l *roundsLoop) hasRow(r int) bool { return r > 0 || l.cfg.Warmup }

// finish records step of round r as done and says so.
func (l *roundsLoop) finish(r int, step Step, started time.Time) error {
	now := l.cfg.now()
	secs := now.Sub(started).Seconds()
	if l.hasRow(r) {
		l.st.row(r).Seconds[step] = secs
	}
	l.st.Done = append(l.st.Done, Done{Iteration: r, Step: step, At: now.UTC(), Seconds: secs})
	if err := save(l.path, l.st); err != nil {
		return err
	}
	l.event(Event{Round: r, Step: step, Finished: true})
	return nil
}

// roundDone says whether round r has no step left.
func (l *roundsLoop) roundDone(r int) bool {
	st := l.st
	if r == 0 {
		return false
	}
	if !st.done(r, StepRollout) || !st.done(r, StepTrain) || !st.done(r, StepServe) {
		return false
	}
	return r%l.cfg.PerPass != 0 || st.done(r, StepEvaluate)
}

// countIdle adds secs to the idle time of the side that had nothing to do.
func (l *roundsLoop) countIdle(secs float64) {
	st := l.st
	if len(l.playing) == 0 && l.publishedThrough() < l.cfg.Rounds {
		st.Async.RolloutIdle += secs
	}
	if !l.training && l.trainedThrough() < l.cfg.Rounds {
		st.Async.TrainerIdle += secs
	}
}

// publishedThrough is the last round published.
func (l *roundsLoop) publishedThrough() int {
	return l.through(func(r int) bool { row := l.st.findRow(r); return row != nil && row.Acting != nil })
}

func (l *roundsLoop) event(e Event) {
	if l.cfg.OnEvent != nil {
		e.InFlight = len(l.playing)
		l.cfg.OnEvent(e)
	}
}

// staleness is how many adapters were trained after version acting and
// before round r's: the policy updates between the one that played round
// r's rows and the one they are trained into.
func (s *State) staleness(r, acting int) int {
	n := 0
	for _, row := range s.Rows {
		if a, ok := row.trained(); ok && a.Version > acting && a.Version < r {
			n++
		}
	}
	return n
}

// adapterOf is the adapter of version v: initial, Base, or one a round
// trained.
func (s *State) adapterOf(v int, initial Adapter) (Adapter, error) {
	switch {
	case v == initial.Version:
		return initial, nil
	case v == Base.Version:
		return Base, nil
	}
	for _, row := range s.Rows {
		if a, ok := row.trained(); ok && a.Version == v {
			return a, nil
		}
	}
	return Adapter{}, fmt.Errorf("the state records no adapter of version %d", v)
}

func (s *State) retired(v int) bool { return slices.Contains(s.Retired, v) }

// findRow is round r's row, nil when it has none yet.
func (s *State) findRow(r int) *Row {
	for i := range s.Rows {
		if s.Rows[i].Iteration == r {
			return &s.Rows[i]
		}
	}
	return nil
}

// sortedRows are the rows in round order (rounds finish out of order).
func (s *State) sortedRows() []Row {
	out := slices.Clone(s.Rows)
	slices.SortFunc(out, func(a, b Row) int { return a.Iteration - b.Iteration })
	for i := range out {
		out[i].Seconds = maps.Clone(out[i].Seconds)
	}
	return out
}

// LoopStatus is what a state says of an asynchronous loop while it runs:
// what `a2farm status --iterate` prints.
type LoopStatus struct {
	// Trained counts the rounds trained; Playing lists the rounds published
	// and not yet sharded, with the version playing each.
	Trained int            `json:"trained"`
	Playing []RoundPlaying `json:"playing"`
	// Newest is the version of the newest adapter a round trained (−1:
	// none yet).
	Newest int         `json:"newest"`
	Async  *AsyncStats `json:"async"`
}

// RoundPlaying is a round in flight.
type RoundPlaying struct {
	Round  int `json:"round"`
	Acting int `json:"acting_version"`
}

// Status is the loop's status as st records it (nil Async: st is a
// synchronous loop's).
func (s *State) Status() LoopStatus {
	out := LoopStatus{Async: s.Async, Newest: Base.Version}
	for _, row := range s.sortedRows() {
		if row.Train != nil && s.done(row.Iteration, StepTrain) && row.Iteration > 0 {
			out.Trained++
		}
		if a, ok := row.trained(); ok {
			out.Newest = max(out.Newest, a.Version)
		}
		if row.Acting != nil && !s.done(row.Iteration, StepRollout) {
			out.Playing = append(out.Playing, RoundPlaying{Round: row.Iteration, Acting: *row.Acting})
		}
	}
	return out
}

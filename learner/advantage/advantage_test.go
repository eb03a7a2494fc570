package advantage

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestReturns(t *testing.T) {
	got := Returns([]float64{1, 0, 2}, 0.5)
	want := []float64{1.5, 1, 2}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Fatalf("Returns = %v, want %v", got, want)
		}
	}
}

// historyKey is appendHistoryKey as a string, for comparing keys.
func historyKey(actions []uint32, t, k int, scheme string) (string, bool) {
	key, ok := appendHistoryKey(nil, actions, t, k, scheme)
	return string(key), ok
}

// TestHistoryLevels: with the state scheme and H = 2 (depths 1..3), step 0
// joins every depth, step 1 only depth 1, step 2 depths 1-2, step 3+ all.
func TestHistoryLevels(t *testing.T) {
	in := interner{}
	actions := in.ids([]string{"a", "b", "c", "d", "e"})
	want := map[int][]int{0: {1, 2, 3}, 1: {1}, 2: {1, 2}, 3: {1, 2, 3}, 4: {1, 2, 3}}
	for step, levels := range want {
		var got []int
		for k := 1; k <= 3; k++ {
			if _, ok := historyKey(actions, step, k, SchemeState); ok {
				got = append(got, k)
			} else {
				break
			}
		}
		if len(got) != len(levels) {
			t.Errorf("step %d: levels %v, want %v", step, got, levels)
		}
	}
	k0, _ := historyKey(actions, 0, 2, SchemeState)
	k0b, _ := historyKey(in.ids([]string{"z"}), 0, 2, SchemeState)
	if k0 != k0b {
		t.Error("first steps of different trajectories must share the empty-history group")
	}
	k3, _ := historyKey(actions, 3, 2, SchemeState)
	if want, _ := historyKey(in.ids([]string{"q", "b", "c", "x"}), 3, 2, SchemeState); k3 != want {
		t.Error("the key must hold the 2 actions before the step, not the current one")
	}
	if _, ok := historyKey(actions, 0, 2, SchemeStateAction); ok {
		t.Error("state_action: step 0 has no depth-2 history")
	}
	ka, _ := historyKey(actions, 1, 2, SchemeStateAction)
	if kb, _ := historyKey(in.ids([]string{"a", "b"}), 1, 2, SchemeStateAction); ka != kb {
		t.Error("state_action keys include the current action")
	}
}

// TestPositionsIgnoredAndRepeats: the same last action at different
// positions, and repeats within one trajectory, share a group.
func TestPositionsIgnoredAndRepeats(t *testing.T) {
	trs := []Trajectory{
		{Returns: []float64{1, 1, 4}, Actions: []string{"s", "x", "y"}}, // step 2 after x
		{Returns: []float64{1, 2}, Actions: []string{"x", "y"}},         // step 1 after x
	}
	cfg := DefaultConfig()
	cfg.H, cfg.NoEpisode = 0, true // depth 1 only
	res, err := Pool(trs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// group (1, x): returns 4 and 2 -> +1, -1; group (1, empty): steps 0 of both: 1, 1 -> 0, 0
	// weights w1 = 2: A = 2*1/(2+1e-6)
	want := 2 * 1.0 / (2 + 1e-6)
	if !near(res.Advantages[0][2], want) || !near(res.Advantages[1][1], -want) {
		t.Errorf("advantages %v", res.Advantages)
	}
	if res.Advantages[0][0] != 0 || res.Advantages[1][0] != 0 {
		t.Errorf("identical returns must give exactly zero: %v", res.Advantages)
	}

	rep := []Trajectory{{Returns: []float64{0, 3, 1}, Actions: []string{"x", "x", "x"}}}
	res, err = Pool(rep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// steps 1 and 2 both follow x: group (1, x) = {3, 1} -> +1, -1; step 0 alone
	if !near(res.Advantages[0][1], want) || !near(res.Advantages[0][2], -want) || res.Advantages[0][0] != 0 {
		t.Errorf("repeated actions: %v", res.Advantages)
	}
}

func TestSingletonGroupsAndEpisodeLevel(t *testing.T) {
	trs := []Trajectory{
		{Returns: []float64{2, 1}, Actions: []string{"a", "b"}},
		{Returns: []float64{0}, Actions: []string{"c"}},
	}
	res, err := Pool(trs, DefaultConfig()) // H = 2: depths 1..3, episode level on
	if err != nil {
		t.Fatal(err)
	}
	// Episode: first returns 2, 0 -> E = +1, -1, attached to every step.
	// First steps share the empty-history group at depths 1..3: +1, -1.
	// First step: (1*E + (2+3+4)*A) / (10 + eps) with E = A.
	first := (1*1.0 + 9*1.0) / (10 + 1e-6)
	if !near(res.Advantages[0][0], first) || !near(res.Advantages[1][0], -first) {
		t.Errorf("first steps: %v", res.Advantages)
	}
	// Step 1 of trajectory 0 is alone in (1, a): only the episode level.
	if !near(res.Advantages[0][1], 1/(1+1e-6)) {
		t.Errorf("singleton group must be skipped: %v", res.Advantages[0][1])
	}
	if res.Covered[0] != 3 || res.Covered[1] != 2 || res.Covered[3] != 2 || res.Steps != 3 {
		t.Errorf("coverage %v of %d steps", res.Covered, res.Steps)
	}
}

func TestMeanStdNorm(t *testing.T) {
	trs := []Trajectory{
		{Returns: []float64{3}, Actions: []string{"a"}},
		{Returns: []float64{1}, Actions: []string{"b"}},
	}
	cfg := DefaultConfig()
	cfg.H, cfg.Norm, cfg.NoEpisode = 0, MeanStdNorm, true
	res, err := Pool(trs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// group of first steps: mean 2, population std 1 -> (3-2)/(1+1e-6)
	a := 1 / (1 + 1e-6)
	want := 2 * a / (2 + 1e-6)
	if !near(res.Advantages[0][0], want) || !near(res.Advantages[1][0], -want) {
		t.Errorf("mean_std_norm: %v", res.Advantages)
	}
}

func TestWeightBounds(t *testing.T) {
	cfg := DefaultConfig()
	for a, want := range map[float64]float64{0: 1, 0.5: math.Exp(0.75), 10: 3, -10: 0.1, 0.7: math.Exp(1.05), -1.6: 0.1} {
		if got := Weight(a, cfg); !near(got, want) {
			t.Errorf("Weight(%v) = %v, want %v", a, got, want)
		}
	}
	// kappa clips before the exponential
	tight := DefaultConfig()
	tight.Kappa, tight.WMax = 0.1, 100
	if got := Weight(10, tight); !near(got, math.Exp(0.15)) {
		t.Errorf("kappa clip: %v", got)
	}
}

func TestZeroTolerance(t *testing.T) {
	// Returns that are equal up to float noise give no advantage at all.
	trs := []Trajectory{
		{Returns: []float64{0.1 + 0.2}, Actions: []string{"a"}},
		{Returns: []float64{0.3}, Actions: []string{"b"}},
	}
	res, err := Pool(trs, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if res.Advantages[0][0] != 0 || res.Weights[0][0] != 1 {
		t.Errorf("advantage %v weight %v; want exactly 0 and 1", res.Advantages[0][0], res.Weights[0][0])
	}
}

// TestPropertyShuffleInvariantAndZeroSum: shuffling trajectories permutes
// the results and nothing else; with mean_norm each group sums to zero,
// so with only depth 1 and all steps grouped the advantages sum to zero.
func TestPropertyShuffleInvariantAndZeroSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		var trs []Trajectory
		for range 2 + rng.IntN(6) {
			n := 1 + rng.IntN(6)
			tr := Trajectory{}
			for range n {
				tr.Returns = append(tr.Returns, math.Round(rng.NormFloat64()*100)/100)
				tr.Actions = append(tr.Actions, string(rune('a'+rng.IntN(3))))
			}
			trs = append(trs, tr)
		}
		res, err := Pool(trs, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		perm := rng.Perm(len(trs))
		shuffled := make([]Trajectory, len(trs))
		for i, p := range perm {
			shuffled[i] = trs[p]
		}
		res2, err := Pool(shuffled, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range perm {
			for s := range trs[p].Returns {
				if !near(res2.Advantages[i][s], res.Advantages[p][s]) {
					t.Fatalf("trial %d: shuffling changed trajectory %d step %d", trial, p, s)
				}
			}
		}
		vals := []float64{}
		for _, tr := range trs {
			vals = append(vals, tr.Returns...)
		}
		sum := 0.0
		for _, a := range normalise(vals, DefaultConfig()) {
			sum += a
		}
		if math.Abs(sum) > 1e-9 {
			t.Fatalf("trial %d: mean_norm group sums to %v", trial, sum)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, mutate := range []func(*Config){
		func(c *Config) { c.H = -1 }, func(c *Config) { c.Scheme = "x" }, func(c *Config) { c.Norm = "z" },
		func(c *Config) { c.WMin, c.WMax = 2, 1 }, func(c *Config) { c.Kappa = 0 },
	} {
		c := DefaultConfig()
		mutate(&c)
		if _, err := Pool(nil, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if _, err := Pool([]Trajectory{{Returns: []float64{1}}}, DefaultConfig()); err == nil {
		t.Error("mismatched returns and actions accepted")
	}
}

// TestSharedStepsCountOnce: a branch (B, forked from A at step 1) shares
// A's step 0. That step is A's alone: it joins no group through B, counts
// once in the steps and coverage, and B gets advantage and weight 0 there.
// B's step 1 is the sibling of A's step 1 (same history), and their
// advantage there is exactly the difference of their returns from the
// pair's mean, at each depth that keys them.
func TestSharedStepsCountOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NoEpisode = true
	a := Trajectory{Returns: []float64{1.0, 0.8, 0.5}, Actions: []string{"s", "x", "y"}}
	b := Trajectory{Returns: []float64{0.6, 0.4, 0.2}, Actions: []string{"s", "u", "v"}, Shared: 1}
	c := Trajectory{Returns: []float64{0.3, 0.1}, Actions: []string{"r", "q"}}
	tests := []struct {
		name    string
		trs     []Trajectory
		steps   int
		covered []int
	}{
		// k=1: A0 and C0 (empty history), A1 and B1 (after s); k=2, 3:
		// A0 and C0 only (A1/B1 have one action of history).
		{"branch", []Trajectory{a, b, c}, 7, []int{0, 4, 2, 2}},
		// Counted twice, B's copy of step 0 would pair with A's.
		{"branch counted twice", []Trajectory{a, {Returns: b.Returns, Actions: b.Actions}, c}, 8, []int{0, 5, 3, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Pool(tt.trs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != tt.steps || !slices.Equal(res.Covered, tt.covered) {
				t.Errorf("steps %d covered %v, want %d %v", res.Steps, res.Covered, tt.steps, tt.covered)
			}
		})
	}
	res, err := Pool([]Trajectory{a, b, c}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Advantages[1][0] != 0 || res.Weights[1][0] != 0 {
		t.Errorf("B's shared step: advantage %g weight %g, want 0 and 0", res.Advantages[1][0], res.Weights[1][0])
	}
	// Step 1: only depth 1 groups A1 and B1: A = ±(0.8-0.4)/2.
	w := 2.0 // (k+1)^1 at k=1
	want := w * 0.2 / (w + cfg.DepthEpsilon)
	if math.Abs(res.Advantages[0][1]-want) > 1e-12 || math.Abs(res.Advantages[1][1]+want) > 1e-12 {
		t.Errorf("A1 %g, B1 %g; want ±%g", res.Advantages[0][1], res.Advantages[1][1], want)
	}
	if _, err := Pool([]Trajectory{{Returns: []float64{1}, Actions: []string{"s"}, Shared: 2}}, cfg); err == nil {
		t.Error("more shared steps than steps was accepted")
	}
}

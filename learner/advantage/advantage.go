// Package advantage computes action-level advantages the A²Agent way:
// discounted returns are compared within groups of steps that share their
// recent history of actions, at several history depths, plus an episode
// level, and the levels are combined with depth weights. It uses only the
// standard library and float64 throughout.
package advantage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Schemes of history keys.
const (
	// SchemeState keys step t at depth k by the k actions before it (the
	// current action excluded); every first step joins one empty-history
	// group at every depth.
	SchemeState = "state"
	// SchemeStateAction keys by the last k actions including the current.
	SchemeStateAction = "state_action"
)

// Normalisations of a group's advantages.
const (
	MeanNorm    = "mean_norm"     // A = G - mean
	MeanStdNorm = "mean_std_norm" // A = (G - mean) / (std + eps), population std
)

// Config holds the method's hyperparameters; start from DefaultConfig.
type Config struct {
	// H is the history length: depths k = 1..H+1 are used.
	H            int
	Scheme       string  // SchemeState or SchemeStateAction
	Norm         string  // MeanNorm or MeanStdNorm
	DepthAlpha   float64 // depth weight (k+1)^DepthAlpha
	NoEpisode    bool    // leave out the episode level k = 0
	ZeroTol      float64 // |A| at or below counts as zero
	Beta         float64 // weight = exp(Beta * clip(A, -Kappa, Kappa))
	Kappa        float64 // advantage clip before the exponential
	WMin, WMax   float64 // weight bounds
	StdEpsilon   float64 // added to std
	DepthEpsilon float64 // added to the weight sum, as the reference does
}

// DefaultConfig is the paper's method with the reference's bugs fixed:
// H = 2, state keys, mean normalisation, depth weights k+1, episode level
// on, zero tolerance 1e-9, β = 1.5, κ = 5, weights in [0.1, 3].
func DefaultConfig() Config {
	return Config{H: 2, Scheme: SchemeState, Norm: MeanNorm, DepthAlpha: 1, ZeroTol: 1e-9,
		Beta: 1.5, Kappa: 5, WMin: 0.1, WMax: 3, StdEpsilon: 1e-6, DepthEpsilon: 1e-6}
}

// Validate reports bad hyperparameters.
func (c Config) Validate() error {
	switch {
	case c.H < 0:
		return fmt.Errorf("H must be >= 0, got %d", c.H)
	case c.Scheme != SchemeState && c.Scheme != SchemeStateAction:
		return fmt.Errorf("scheme %q: want %s or %s", c.Scheme, SchemeState, SchemeStateAction)
	case c.Norm != MeanNorm && c.Norm != MeanStdNorm:
		return fmt.Errorf("normalisation %q: want %s or %s", c.Norm, MeanNorm, MeanStdNorm)
	case c.Kappa <= 0 || c.Beta < 0 || c.ZeroTol < 0 || c.StdEpsilon < 0 || c.DepthEpsilon < 0:
		return errors.New("kappa must be > 0; beta, the zero tolerance and the epsilons >= 0")
	case c.WMin <= 0 || c.WMax < c.WMin:
		return fmt.Errorf("weight bounds [%g, %g] are invalid", c.WMin, c.WMax)
	}
	return nil
}

// Trajectory is what the computation needs of one rollout: per step, its
// return and action key.
type Trajectory struct {
	Returns []float64
	Actions []string
	// Shared counts the leading steps that belong to another trajectory
	// of the pool (a branch's replayed prefix is its parent's steps):
	// they are history for the later steps but join no group, count in
	// no coverage and get advantage and weight 0 here.
	Shared int
}

// Result holds per-trajectory, per-step advantages and weights, plus the
// group coverage: per depth k (0 = episode), how many steps were in a
// group of two or more.
type Result struct {
	Advantages [][]float64
	Weights    [][]float64
	Covered    []int // index k
	Steps      int
}

// Pool computes the advantages of one pool: all trajectories of one
// instance in one iteration (infrastructure failures already removed).
func Pool(trs []Trajectory, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	maxK := cfg.H + 1
	res := &Result{Covered: make([]int, maxK+1)}
	for i, tr := range trs {
		if len(tr.Returns) != len(tr.Actions) {
			return nil, fmt.Errorf("trajectory %d: %d returns for %d actions", i, len(tr.Returns), len(tr.Actions))
		}
		if tr.Shared < 0 || tr.Shared > len(tr.Returns) {
			return nil, fmt.Errorf("trajectory %d: %d shared steps of %d", i, tr.Shared, len(tr.Returns))
		}
		res.Steps += len(tr.Returns) - tr.Shared
	}

	// items[i][t] collects (k, A^k) pairs.
	type item struct {
		k int
		a float64
	}
	// One backing array: a step holds at most maxK+1 items.
	items := make([][][]item, len(trs))
	all := 0
	for _, tr := range trs {
		all += len(tr.Returns)
	}
	backing := make([]item, all*(maxK+1))
	for i, tr := range trs {
		items[i] = make([][]item, len(tr.Returns))
		for t := range items[i] {
			items[i][t], backing = backing[:0:maxK+1], backing[maxK+1:]
		}
	}

	// Episode level: first-step returns against their mean. Every
	// complete trajectory counts once, a branch too (its first-step
	// return runs through its parent's prefix and then its own turns);
	// its advantage goes to the steps it owns.
	if !cfg.NoEpisode {
		var firsts []float64
		var who []int
		for i, tr := range trs {
			if len(tr.Returns) > 0 {
				firsts = append(firsts, tr.Returns[0])
				who = append(who, i)
			}
		}
		if len(firsts) >= 2 {
			adv := normalise(firsts, cfg)
			for j, i := range who {
				for t := trs[i].Shared; t < len(trs[i].Returns); t++ {
					items[i][t] = append(items[i][t], item{0, adv[j]})
				}
				res.Covered[0] += len(trs[i].Returns) - trs[i].Shared
			}
		}
	}

	// History levels.
	in := interner{}
	actions := make([][]uint32, len(trs))
	for i, tr := range trs {
		actions[i] = in.ids(tr.Actions)
	}
	type member struct{ i, t int }
	var key []byte
	for k := 1; k <= maxK; k++ {
		// Groups in order of first appearance; the index map is looked up
		// with the key buffer, which allocates only for a new group.
		index := map[string]int{}
		var groups [][]member
		for i, tr := range trs {
			for t := tr.Shared; t < len(tr.Returns); t++ {
				var ok bool
				if key, ok = appendHistoryKey(key[:0], actions[i], t, k, cfg.Scheme); !ok {
					continue
				}
				g, seen := index[string(key)]
				if !seen {
					g = len(groups)
					index[string(key)] = g
					groups = append(groups, nil)
				}
				groups[g] = append(groups[g], member{i, t})
			}
		}
		for _, ms := range groups {
			if len(ms) < 2 {
				continue
			}
			vals := make([]float64, len(ms))
			for j, m := range ms {
				vals[j] = trs[m.i].Returns[m.t]
			}
			adv := normalise(vals, cfg)
			for j, m := range ms {
				items[m.i][m.t] = append(items[m.i][m.t], item{k, adv[j]})
			}
			res.Covered[k] += len(ms)
		}
	}

	res.Advantages = make([][]float64, len(trs))
	res.Weights = make([][]float64, len(trs))
	for i, tr := range trs {
		res.Advantages[i] = make([]float64, len(tr.Returns))
		res.Weights[i] = make([]float64, len(tr.Returns))
		for t := range tr.Returns {
			num, den := 0.0, 0.0
			for _, it := range items[i][t] {
				if math.Abs(it.a) <= cfg.ZeroTol {
					continue
				}
				w := math.Pow(float64(it.k+1), cfg.DepthAlpha)
				num += w * it.a
				den += w
			}
			a := 0.0
			if den > 0 {
				a = num / (den + cfg.DepthEpsilon)
			}
			res.Advantages[i][t] = a
			if t >= tr.Shared {
				res.Weights[i][t] = Weight(a, cfg)
			}
		}
	}
	return res, nil
}

// interner numbers action keys, so that a group key costs a few bytes per
// action however long the canonical action text is.
type interner map[string]uint32

func (in interner) ids(actions []string) []uint32 {
	out := make([]uint32, len(actions))
	for t, a := range actions {
		id, ok := in[a]
		if !ok {
			id = uint32(len(in))
			in[a] = id
		}
		out[t] = id
	}
	return out
}

// appendHistoryKey appends the group key of step t at depth k to key; ok
// is false when the step has no group at this depth (history too short).
func appendHistoryKey(key []byte, actions []uint32, t, k int, scheme string) ([]byte, bool) {
	var hist []uint32
	switch scheme {
	case SchemeStateAction:
		if t+1 < k {
			return key, false
		}
		hist = actions[t-k+1 : t+1]
	default:
		if t > 0 && t < k {
			return key, false
		}
		if t >= k {
			hist = actions[t-k : t]
		}
	}
	// Positions and trajectories are not part of the key.
	key = binary.AppendUvarint(key, uint64(k))
	for _, a := range hist {
		key = binary.LittleEndian.AppendUint32(key, a)
	}
	return key, true
}

// normalise returns the group's advantages.
func normalise(vals []float64, cfg Config) []float64 {
	mean := 0.0
	for _, v := range vals {
		mean += v
	}
	mean /= float64(len(vals))
	out := make([]float64, len(vals))
	std := 1.0
	if cfg.Norm == MeanStdNorm {
		ss := 0.0
		for _, v := range vals {
			ss += (v - mean) * (v - mean)
		}
		std = math.Sqrt(ss/float64(len(vals))) + cfg.StdEpsilon
	}
	for i, v := range vals {
		out[i] = (v - mean) / std
	}
	return out
}

// Weight maps an advantage to a token weight: exp(β·clip(A, −κ, κ))
// clipped to [WMin, WMax].
func Weight(a float64, cfg Config) float64 {
	a = math.Max(-cfg.Kappa, math.Min(cfg.Kappa, a))
	return math.Max(cfg.WMin, math.Min(cfg.WMax, math.Exp(cfg.Beta*a)))
}

// Returns discounts rewards: G_t = r_t + γ·G_{t+1}.
func Returns(rewards []float64, gamma float64) []float64 {
	out := make([]float64, len(rewards))
	next := 0.0
	for t := len(rewards) - 1; t >= 0; t-- {
		next = rewards[t] + gamma*next
		out[t] = next
	}
	return out
}

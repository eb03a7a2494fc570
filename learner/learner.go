package learner

import (
	"fmt"
	"math"
	"slices"

	"github.com/a2farm/a2farm/learner/advantage"
	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/learner/rewards"
	"github.com/a2farm/a2farm/schema"
)

// Config holds the learner's hyperparameters.
type Config struct {
	Rewards   rewards.Config
	Advantage advantage.Config
	// KeepUnsuccessful turns off the reference trainer filter, which drops
	// trajectories that never surfaced a gold file or have fewer than
	// three messages.
	KeepUnsuccessful bool
}

// DefaultConfig is the paper's method with the reference's bugs fixed
// (docs/ARCHITECTURE.md, Defaults).
func DefaultConfig() Config {
	return Config{Rewards: rewards.DefaultConfig(), Advantage: advantage.DefaultConfig()}
}

// Labeled is a trajectory with its rewards, advantages and weights.
type Labeled struct {
	Trajectory schema.Trajectory
	Labels     rewards.Labels
	Advantages []float64
	Weights    []float64
	// GapFile is the file-level discovery recall minus committed recall.
	GapFile float64
	// Skipped says why the trajectory has no labels ("" when it has).
	Skipped string
}

// Result is a processed batch.
type Result struct {
	Trajectories []Labeled
	Diagnostics  Diagnostics
}

// Diagnostics summarise a batch.
type Diagnostics struct {
	Trajectories, Labeled, Steps int
	AdvantageMean, AdvantageStd  float64
	// AdvantageHistogram counts advantages in bins of width 0.25 over
	// [-2, 2] (values outside go to the end bins); WeightHistogram counts
	// weights in bins of width 0.25 over [0, 3].
	AdvantageHistogram []int
	WeightHistogram    []int
	// Coverage[k] is the share of steps in a group of two or more at
	// history depth k (0: episode level).
	Coverage []float64
	// DCGapFile is the mean file-level discovery recall minus committed
	// recall.
	DCGapFile float64
	// Branches compares the batch with its base samples alone; nil when
	// the batch has no branch.
	Branches *BranchDiagnostics `json:",omitempty"`
}

// BranchDiagnostics says what branches bought and cost: steps (turns a
// trajectory played itself; a branch's replayed prefix is its parent's)
// and tokens of base samples and of branches, and the coverage and
// advantage spread of the base samples alone beside the batch's.
type BranchDiagnostics struct {
	Branches                 int
	BaseSteps, BranchSteps   int
	BaseTokens, BranchTokens int64
	// BaseCoverage, BaseAdvantageMean and BaseAdvantageStd are the
	// diagnostics of the batch without its branches.
	BaseCoverage                        []float64
	BaseAdvantageMean, BaseAdvantageStd float64
}

type poolKey struct {
	iteration int64
	instance  string
}

// Process labels trajectories, pools them per (iteration, instance) and
// computes advantages and weights. Trajectories that did not play out
// (schema.Status.PlayedOut: failures of the farm, the policy server, a
// tool or the clock), have no turns, or whose instance has no gold are
// skipped and left out of every group statistic.
func Process(trs []schema.Trajectory, gold map[string]schema.Locations, cfg Config) (*Result, error) {
	if err := cfg.Rewards.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Advantage.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Trajectories: make([]Labeled, len(trs))}
	pools := map[poolKey][]int{}
	var order []poolKey
	for i, tr := range trs {
		lt := &res.Trajectories[i]
		lt.Trajectory = tr
		g, ok := gold[tr.InstanceID]
		switch {
		case tr.Status == schema.StatusInfraError:
			lt.Skipped = "infrastructure failure"
		case !tr.Status.PlayedOut():
			lt.Skipped = "did not play out: " + string(tr.Status)
		case !ok:
			lt.Skipped = "no gold for the instance"
		default:
			lb, ok := rewards.Label(tr, g, cfg.Rewards)
			if !ok {
				lt.Skipped = "no turns or no gold file"
				break
			}
			lt.Labels = lb
			lt.GapFile = metrics.Commit(lb.Discovered[rewards.File], tr.Predictions.Files, g.Files).Gap
			k := poolKey{tr.Iteration, tr.InstanceID}
			if _, seen := pools[k]; !seen {
				order = append(order, k)
			}
			pools[k] = append(pools[k], i)
		}
	}
	covered, steps, err := poolAll(res.Trajectories, pools, order, cfg.Advantage)
	if err != nil {
		return nil, err
	}
	res.Diagnostics = diagnose(res.Trajectories, covered, steps)
	if err := compareBranches(res, pools, order, cfg.Advantage); err != nil {
		return nil, err
	}
	return res, nil
}

// poolAll computes the advantages and weights of every pool of labelled
// trajectories, in place, and the steps covered per depth.
func poolAll(lts []Labeled, pools map[poolKey][]int, order []poolKey, cfg advantage.Config) (covered []int, steps int, err error) {
	covered = make([]int, cfg.H+2)
	for _, k := range order {
		members := pools[k]
		in := make([]advantage.Trajectory, len(members))
		for j, i := range members {
			lt := &lts[i]
			in[j].Returns = lt.Labels.Returns
			in[j].Shared = lt.Trajectory.OwnTurns()
			for _, turn := range lt.Trajectory.Turns {
				in[j].Actions = append(in[j].Actions, turn.ActionKey)
			}
		}
		out, err := advantage.Pool(in, cfg)
		if err != nil {
			return nil, 0, fmt.Errorf("pool %s/%d: %w", k.instance, k.iteration, err)
		}
		byJob := map[string]int{}
		for j, i := range members {
			lts[i].Advantages = out.Advantages[j]
			lts[i].Weights = out.Weights[j]
			byJob[lts[i].Trajectory.JobID] = i
		}
		for _, i := range members {
			keepParents(&lts[i], lts, byJob)
		}
		for d, n := range out.Covered {
			covered[d] += n
		}
		steps += out.Steps
	}
	return covered, steps, nil
}

// compareBranches fills Diagnostics.Branches when the batch has branches:
// the base samples' labels, pooled again without the branches.
func compareBranches(res *Result, pools map[poolKey][]int, order []poolKey, cfg advantage.Config) error {
	var base []Labeled
	at := map[int]int{} // index in res.Trajectories → index in base
	bd := &BranchDiagnostics{}
	for i, lt := range res.Trajectories {
		tr := lt.Trajectory
		steps, tokens := 0, int64(0)
		if lt.Skipped == "" {
			for _, turn := range tr.Turns[tr.OwnTurns():] {
				steps++
				tokens += turn.PromptTokens + turn.CompletionTokens
			}
		}
		if tr.Fork.IsBranch() {
			bd.Branches++
			bd.BranchSteps += steps
			bd.BranchTokens += tokens
			continue
		}
		bd.BaseSteps += steps
		bd.BaseTokens += tokens
		at[i] = len(base)
		base = append(base, lt) // a copy: pooling assigns its own advantages
	}
	if bd.Branches == 0 {
		return nil
	}
	basePools := map[poolKey][]int{}
	var baseOrder []poolKey
	for _, k := range order {
		for _, i := range pools[k] {
			if j, ok := at[i]; ok {
				if _, seen := basePools[k]; !seen {
					baseOrder = append(baseOrder, k)
				}
				basePools[k] = append(basePools[k], j)
			}
		}
	}
	covered, steps, err := poolAll(base, basePools, baseOrder, cfg)
	if err != nil {
		return err
	}
	d := diagnose(base, covered, steps)
	bd.BaseCoverage, bd.BaseAdvantageMean, bd.BaseAdvantageStd = d.Coverage, d.AdvantageMean, d.AdvantageStd
	res.Diagnostics.Branches = bd
	return nil
}

// keepParents gives a branch's replayed turns their parent's returns and
// advantages: those turns are the parent's, trained (weight > 0) only
// there, and a branch's rows show them as context, weight 0.
func keepParents(lt *Labeled, lts []Labeled, byJob map[string]int) {
	own := lt.Trajectory.OwnTurns()
	p, ok := byJob[lt.Trajectory.Fork.ParentJobID]
	if own == 0 || !ok {
		return
	}
	parent := lts[p]
	if len(parent.Advantages) < own || len(parent.Labels.Returns) < own {
		return
	}
	lt.Labels.Returns = slices.Clone(lt.Labels.Returns)
	copy(lt.Labels.Returns[:own], parent.Labels.Returns[:own])
	copy(lt.Advantages[:own], parent.Advantages[:own])
}

func diagnose(lts []Labeled, covered []int, steps int) Diagnostics {
	d := Diagnostics{Trajectories: len(lts), Steps: steps, AdvantageHistogram: make([]int, 16), WeightHistogram: make([]int, 12)}
	var advs []float64
	gap, nGap := 0.0, 0
	for _, lt := range lts {
		if lt.Skipped != "" {
			continue
		}
		d.Labeled++
		own := lt.Trajectory.OwnTurns()
		advs = append(advs, lt.Advantages[own:]...)
		for _, w := range lt.Weights[own:] {
			d.WeightHistogram[clampBin(int(math.Floor(w/0.25)), 12)]++
		}
		gap += lt.GapFile
		nGap++
	}
	for _, a := range advs {
		d.AdvantageMean += a
		d.AdvantageHistogram[clampBin(int(math.Floor((a+2)/0.25)), 16)]++
	}
	if len(advs) > 0 {
		d.AdvantageMean /= float64(len(advs))
		for _, a := range advs {
			d.AdvantageStd += (a - d.AdvantageMean) * (a - d.AdvantageMean)
		}
		d.AdvantageStd = math.Sqrt(d.AdvantageStd / float64(len(advs)))
	}
	d.Coverage = make([]float64, len(covered))
	for k, n := range covered {
		if steps > 0 {
			d.Coverage[k] = float64(n) / float64(steps)
		}
	}
	if nGap > 0 {
		d.DCGapFile = gap / float64(nGap)
	}
	return d
}

func clampBin(i, n int) int { return max(0, min(n-1, i)) }

// SFTRows selects teacher trajectories for the supervised warm-up, as the
// paper does: per instance, among trajectories whose answer matches the
// gold (leniently) at every level, the one with the highest
// file discovery recall, ties to the fewest steps. Every assistant turn
// gets weight 1 (write them with KeepUnsuccessful).
func SFTRows(res *Result) []Labeled {
	best := map[string]int{}
	var order []string
	for i, lt := range res.Trajectories {
		if lt.Skipped != "" || !matchesEveryLevel(lt) {
			continue
		}
		id := lt.Trajectory.InstanceID
		j, seen := best[id]
		if !seen {
			order = append(order, id)
			best[id] = i
			continue
		}
		cur := res.Trajectories[j]
		if lt.Labels.Recall[rewards.File] > cur.Labels.Recall[rewards.File] ||
			lt.Labels.Recall[rewards.File] == cur.Labels.Recall[rewards.File] && len(lt.Trajectory.Turns) < len(cur.Trajectory.Turns) {
			best[id] = i
		}
	}
	var out []Labeled
	for _, id := range order {
		lt := res.Trajectories[best[id]]
		ones := make([]float64, len(lt.Trajectory.Turns))
		for i := range ones {
			ones[i] = 1
		}
		lt.Weights = ones
		out = append(out, lt)
	}
	return out
}

// matchesEveryLevel: at least one lenient match at each level (an F1
// above zero implies one). As in the reference, a level whose gold is
// empty has no match, so such an instance never gives SFT rows.
func matchesEveryLevel(lt Labeled) bool {
	for _, f1 := range lt.Labels.F1 {
		if f1 == 0 {
			return false
		}
	}
	return true
}

// Package branch plans branch rollouts: after an instance's base samples
// are in, which of them fork at which turns, and the branch jobs that
// replay them (docs/ARCHITECTURE.md, Branch rollouts). The coordinator
// plans a farm's branches with it and localize its own, the same way.
package branch

import (
	"cmp"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/schema"
)

// Point is one fork point: the base sample to fork and the turn from which
// its branches sample themselves.
type Point struct {
	Parent schema.Trajectory
	Turn   int64
}

// Forkable reports whether a base trajectory may have branches: only a
// rollout that played to its end (ok, or truncated by the tool budget);
// a failed one's record is not an episode the policy would continue.
func Forkable(tr schema.Trajectory) bool {
	return !tr.Fork.IsBranch() && (tr.Status == schema.StatusOK || tr.Status == schema.StatusTruncated)
}

// Plan chooses the fork points of one instance from its base
// trajectories. With fixed turns (ForkAt) every forkable parent forks at
// each of them that it lived past. Otherwise it forks at the steps whose
// history group at depth Depth has no sibling, cheapest first (a branch
// from turn t is expected to play as many turns as the instance's samples
// that reached turn t played from there), while
// the expected extra turns stay within Budget × the base turns. Points
// come ordered by parent sample, then turn, so that a plan made again from
// the same trajectories is the same.
func Plan(b schema.Branching, base []schema.Trajectory) []Point {
	if !b.On() {
		return nil
	}
	var parents, grouped []schema.Trajectory
	baseTurns := 0
	for _, tr := range base {
		if tr.Fork.IsBranch() {
			continue
		}
		baseTurns += len(tr.Turns)
		if tr.Status != schema.StatusInfraError { // what the learner groups
			grouped = append(grouped, tr)
		}
		if Forkable(tr) {
			parents = append(parents, tr)
		}
	}
	slices.SortFunc(parents, func(a, b schema.Trajectory) int { return cmp.Compare(a.Sample, b.Sample) })
	var points []Point
	if len(b.ForkAt) > 0 {
		turns := slices.Compact(slices.Sorted(slices.Values(b.ForkAt)))
		for _, p := range parents {
			for _, t := range turns {
				if t >= 1 && t < int64(len(p.Turns)) {
					points = append(points, Point{p, t})
				}
			}
		}
		return points
	}
	depth := int(b.Depth)
	count := map[string]int{}
	for _, p := range grouped {
		for t := depth; t < len(p.Turns); t++ {
			count[historyKey(p, t, depth)]++
		}
	}
	type candidate struct {
		Point
		cost int64
	}
	// A candidate's cost is what a branch from it is expected to play.
	var cands []candidate
	for _, p := range parents {
		for t := max(depth, 1); t < len(p.Turns); t++ {
			if count[historyKey(p, t, depth)] == 1 {
				cands = append(cands, candidate{Point{p, int64(t)}, expectedRest(parents, t) * b.Branches})
			}
		}
	}
	slices.SortStableFunc(cands, func(x, y candidate) int { return cmp.Compare(x.cost, y.cost) })
	budget := int64(b.Budget * float64(baseTurns))
	spent := int64(0)
	for _, c := range cands {
		if spent+c.cost > budget {
			continue
		}
		spent += c.cost
		points = append(points, c.Point)
	}
	slices.SortFunc(points, func(x, y Point) int {
		return cmp.Or(cmp.Compare(x.Parent.Sample, y.Parent.Sample), cmp.Compare(x.Turn, y.Turn))
	})
	return points
}

// expectedRest is how many turns an episode that reached turn t plays
// from there on, on average over the instance's samples that did (rounded
// up): a branch's own length is not known before it is played, and its
// parent's rest is one draw of it.
func expectedRest(parents []schema.Trajectory, t int) int64 {
	sum, n := 0, 0
	for _, p := range parents {
		if len(p.Turns) > t {
			sum += len(p.Turns) - t
			n++
		}
	}
	return int64((sum + n - 1) / n)
}

// historyKey is the key of step t at depth k: the k actions before it, as
// the learner's history groups key them (the state scheme).
func historyKey(tr schema.Trajectory, t, k int) string {
	var b strings.Builder
	for _, turn := range tr.Turns[t-k : t] {
		b.WriteString(turn.ActionKey)
		b.WriteByte(0)
	}
	return b.String()
}

// Jobs plans the branch jobs of the points, Branches per point. Branch b
// of point i is sample samples + i·Branches + b of the instance, with that
// sample's seed; logSeq gives where each parent's trajectory sits in the
// farm's log (nil outside a farm).
func Jobs(spec schema.RunSpec, runID string, iteration int64, in schema.Instance, samples int, points []Point,
	logSeq func(parent schema.Trajectory) int64) []schema.Job {
	var out []schema.Job
	for i, p := range points {
		for b := range spec.Branching.Branches {
			fork := schema.Fork{ParentJobID: p.Parent.JobID, ParentSample: p.Parent.Sample, Turn: p.Turn, Branch: b}
			if logSeq != nil {
				fork.LogSeq = logSeq(p.Parent)
			}
			sample := int64(samples) + int64(i)*spec.Branching.Branches + b
			out = append(out, spec.Branch(runID, iteration, in, sample, fork))
		}
	}
	return out
}

package metrics

import (
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/schema"
)

// TrajectoryStats adds the metrics that need whole trajectories, averaged
// over trajectories: per level the discovery–commit gap ("<level>.dc_gap",
// discovery recall minus committed recall) and the type-B rate
// ("<level>.type_b_rate", share of trajectories that saw a gold location
// and did not answer it), where discovery is what the tools returned;
// and the cost of an episode: "turns", "tool_calls.<tool>",
// "observation_chars", "wall_seconds", "prompt_tokens",
// "completion_tokens". Trajectories of instances without gold count for
// cost only; branches (Fork) not at all: the policy is measured on the
// samples it played from the start.
func TrajectoryStats(trs []schema.Trajectory, golds []schema.Gold, l *lang.Set) map[string]float64 {
	gold := map[string]schema.Locations{}
	for _, g := range golds {
		if g.FileChanges != nil {
			gold[g.InstanceID] = g.Locations()
		}
	}
	out := map[string]float64{}
	sums := map[string]float64{}
	counts := map[string]int{}
	add := func(key string, v float64) {
		sums[key] += v
		counts[key]++
	}
	for _, tr := range trs {
		if tr.Fork.IsBranch() {
			continue // the policy is measured on its base samples
		}
		var seen schema.Locations
		toolCalls := map[string]float64{}
		obs := 0.0
		for _, turn := range tr.Turns {
			seen.Files = append(seen.Files, turn.Surfaced.Files...)
			seen.Modules = append(seen.Modules, turn.Surfaced.Modules...)
			seen.Entities = append(seen.Entities, turn.Surfaced.Entities...)
			if turn.ToolName != "" {
				toolCalls[turn.ToolName]++
			}
			obs += float64(turn.ObservationChars)
		}
		add("turns", float64(len(tr.Turns)))
		add("observation_chars", obs)
		add("prompt_tokens", float64(tr.PromptTokens))
		add("completion_tokens", float64(tr.CompletionTokens))
		if !tr.StartedAt.IsZero() && !tr.FinishedAt.IsZero() {
			add("wall_seconds", tr.FinishedAt.Sub(tr.StartedAt).Seconds())
		}
		for name, n := range toolCalls {
			sums["tool_calls."+name] += n
		}
		g, ok := gold[tr.InstanceID]
		if !ok {
			continue
		}
		levels := []struct {
			name                     string
			seen, committed, goldIDs []string
		}{
			{"file", seen.Files, tr.Predictions.Files, g.Files},
			{"module", seen.Modules, tr.Predictions.Modules, g.Modules},
			{"function", seen.Entities, NormalizeFunctions(tr.Predictions.Entities, l), g.Entities},
		}
		for _, l := range levels {
			if len(l.goldIDs) == 0 {
				continue
			}
			c := Commit(l.seen, l.committed, l.goldIDs)
			add(l.name+".dc_gap", c.Gap)
			typeB := 0.0
			if c.TypeB {
				typeB = 1
			}
			add(l.name+".type_b_rate", typeB)
		}
	}
	for key, sum := range sums {
		if n := counts[key]; n > 0 {
			out[key] = sum / float64(n)
		} else if len(trs) > 0 {
			out[key] = sum / float64(len(trs)) // tool calls: per trajectory
		}
	}
	return out
}

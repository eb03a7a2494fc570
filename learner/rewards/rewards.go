// Package rewards labels trajectories with the A²Agent rewards: per-turn
// discovery progress at file, module and entity level, a step cost, and at
// the last step the (lenient) F1 of the answer and its discovery–commit
// recall; then discounted returns.
package rewards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/learner/advantage"
	"github.com/a2farm/a2farm/learner/metrics"
	"github.com/a2farm/a2farm/schema"
)

// Discovery modes.
const (
	// DiscoverySurfaced counts a gold location as discovered at the turn a
	// tool returned it (its surfaced ids, or its exact id in the
	// observation text).
	DiscoverySurfaced = "surfaced"
	// DiscoveryReference reproduces the reference: any mention in the
	// observation, the agent's own text or its tool arguments (the
	// finish answer included) counts.
	DiscoveryReference = "reference"
)

// Config holds the reward weights.
type Config struct {
	AlphaFile, AlphaModule, AlphaEntity float64
	StepCost                            float64
	F1Scale                             float64
	Commitment                          float64 // λ
	Gamma                               float64
	Discovery                           string
	// TerminalOnly drops progress and step cost: only the last step is
	// rewarded, with the F1 term.
	TerminalOnly bool
	// Languages say what a source path looks like, for the reference
	// discovery mode's mention rule (required there only).
	Languages *lang.Set `json:"-"`
}

// DefaultConfig holds the defaults of docs/ARCHITECTURE.md: α = (1, 0.5, 0.5), c = 0.02,
// s = 1, λ = 0.5, γ = 0.9, surfaced discovery.
func DefaultConfig() Config {
	return Config{AlphaFile: 1, AlphaModule: 0.5, AlphaEntity: 0.5, StepCost: 0.02, F1Scale: 1,
		Commitment: 0.5, Gamma: 0.9, Discovery: DiscoverySurfaced}
}

// Validate reports bad settings.
func (c Config) Validate() error {
	if c.Discovery != DiscoverySurfaced && c.Discovery != DiscoveryReference {
		return fmt.Errorf("discovery %q: want %s or %s", c.Discovery, DiscoverySurfaced, DiscoveryReference)
	}
	if c.Discovery == DiscoveryReference && c.Languages.Len() == 0 {
		return fmt.Errorf("discovery %s needs a language to find mentioned paths", DiscoveryReference)
	}
	if c.Gamma < 0 || c.Gamma > 1 {
		return fmt.Errorf("gamma must be in [0, 1], got %g", c.Gamma)
	}
	return nil
}

// Level indexes file, module and entity.
const (
	File = iota
	Module
	Entity
)

// Labels are a trajectory's rewards.
type Labels struct {
	// Progress[t][L] is the increase of discovery recall at level L.
	Progress [][3]float64
	Rewards  []float64
	// Parts[t] says where Rewards[t] came from; its terms add up to it.
	Parts   []Parts
	Returns []float64
	// Terminal statistics per level.
	F1     [3]float64
	DC     [3]float64
	Recall [3]float64 // discovery recall at the end
	// Discovered holds the gold ids found, per level.
	Discovered [3][]string
}

// Parts are the terms of one turn's reward: discovery progress weighted by
// level, the (negative) step cost, and on the last turn the terminal F1 and
// discovery–commit terms.
type Parts struct {
	Discovery, StepCost, Terminal, Commit float64
}

// Sum is the turn's reward.
func (p Parts) Sum() float64 { return p.Discovery + p.StepCost + p.Terminal + p.Commit }

// Label computes the rewards of one trajectory. ok is false when it cannot
// be labelled: no turns, or no gold file.
func Label(tr schema.Trajectory, gold schema.Locations, cfg Config) (Labels, bool) {
	if len(tr.Turns) == 0 || len(gold.Files) == 0 {
		return Labels{}, false
	}
	goldBy := [3][]string{gold.Files, gold.Modules, gold.Entities}
	found := [3]map[string]bool{{}, {}, {}}
	lb := Labels{Progress: make([][3]float64, 0, len(tr.Turns))}
	prev := [3]float64{}
	var mentions *mentionRule
	if cfg.Discovery == DiscoveryReference {
		mentions = newMentionRule(cfg.Languages)
	}
	for i := range tr.Turns {
		seen := discoveredAt(&tr.Turns[i], mentions)
		var prog [3]float64
		for L := range 3 {
			for _, g := range goldBy[L] {
				if !found[L][g] && seen.has(L, g) {
					found[L][g] = true
					lb.Discovered[L] = append(lb.Discovered[L], g)
				}
			}
			r := recall(found[L], goldBy[L])
			prog[L] = r - prev[L]
			prev[L] = r
		}
		lb.Progress = append(lb.Progress, prog)
	}
	lb.Recall = prev
	committed := [3][]string{tr.Predictions.Files, tr.Predictions.Modules, tr.Predictions.Entities}
	for L := range 3 {
		lb.F1[L] = metrics.LenientPRF(committed[L], goldBy[L]).F1
		lb.DC[L] = metrics.Commit(lb.Discovered[L], committed[L], goldBy[L]).DC
	}
	alpha := [3]float64{cfg.AlphaFile, cfg.AlphaModule, cfg.AlphaEntity}
	lb.Parts = make([]Parts, len(lb.Progress))
	if !cfg.TerminalOnly {
		for t, p := range lb.Progress {
			lb.Parts[t].Discovery = alpha[0]*p[0] + alpha[1]*p[1] + alpha[2]*p[2]
			lb.Parts[t].StepCost = -cfg.StepCost
		}
	}
	last := len(lb.Parts) - 1
	lb.Parts[last].Terminal = cfg.F1Scale * (alpha[0]*lb.F1[0] + alpha[1]*lb.F1[1] + alpha[2]*lb.F1[2])
	if !cfg.TerminalOnly {
		lb.Parts[last].Commit = cfg.Commitment * (alpha[0]*lb.DC[0] + alpha[1]*lb.DC[1] + alpha[2]*lb.DC[2])
	}
	lb.Rewards = make([]float64, len(lb.Parts))
	for t, p := range lb.Parts {
		lb.Rewards[t] = p.Sum()
	}
	lb.Returns = advantage.Returns(lb.Rewards, cfg.Gamma)
	return lb, true
}

func recall(found map[string]bool, gold []string) float64 {
	if len(gold) == 0 {
		return 0
	}
	n := 0
	for _, g := range gold {
		if found[g] {
			n++
		}
	}
	return float64(n) / float64(len(gold))
}

// evidence is what one turn shows, per level: ids (surfaced by the tool,
// or mentioned anywhere in reference mode) and, in surfaced mode, the
// observation text, where an exact id also counts.
type evidence struct {
	ids  [3][]string
	text string
}

// discoveredAt collects the evidence of a turn: the tool's surfaced ids,
// or, with a mention rule (reference mode), every mention.
func discoveredAt(turn *schema.Turn, mentions *mentionRule) evidence {
	if mentions != nil {
		files, modules, entities := mentions.find(turn.Observation + "\n" + turn.AssistantContent + "\n" + argsText(turn.ToolArgs))
		return evidence{ids: [3][]string{files, modules, entities}}
	}
	return evidence{ids: [3][]string{turn.Surfaced.Files, turn.Surfaced.Modules, turn.Surfaced.Entities},
		text: turn.Observation}
}

// has reports whether gold id g was discovered at level L. A turn shows a
// handful of ids, so a scan beats building a set per turn.
func (e evidence) has(L int, g string) bool {
	return slices.Contains(e.ids[L], g) || e.text != "" && containsID(e.text, g)
}

// argsText is the tool arguments as the reference serialises them (JSON).
func argsText(args string) string {
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		return args
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// containsID reports whether id occurs in text as a whole id: not glued to
// other path or name characters on either side.
func containsID(text, id string) bool {
	for start := 0; ; {
		i := strings.Index(text[start:], id)
		if i < 0 {
			return false
		}
		i += start
		before := i == 0 || !isIDByte(text[i-1])
		j := i + len(id)
		after := j == len(text) || !isIDByte(text[j]) || text[j] == '.' && (j+1 == len(text) || !isIDByte(text[j+1]))
		if before && after {
			return true
		}
		start = i + 1
	}
}

func isIDByte(b byte) bool {
	return b == '_' || b == '.' || b == '/' || b == '-' || b == ':' ||
		b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// mentionRule is the reference's mention rule (§D.2) for one language's
// source paths.
type mentionRule struct {
	file, entity *regexp.Regexp
}

func newMentionRule(l *lang.Set) *mentionRule {
	ext := l.ExtensionPattern()
	return &mentionRule{
		file:   regexp.MustCompile(`[\w./-]+` + ext),
		entity: regexp.MustCompile(`([\w./-]+` + ext + `):([\w.]+)`),
	}
}

// find extracts the mentions of text: files with a "/", entities
// path.py:Name.x and their modules path.py:Name.
func (r *mentionRule) find(text string) (files, modules, entities []string) {
	clean := func(p string) string { return strings.TrimLeft(p, "./") }
	for _, m := range r.file.FindAllString(text, -1) {
		if p := clean(m); strings.Contains(p, "/") {
			files = append(files, p)
		}
	}
	for _, m := range r.entity.FindAllStringSubmatch(text, -1) {
		p := clean(m[1])
		if !strings.Contains(p, "/") {
			continue
		}
		entities = append(entities, p+":"+m[2])
		first, _, _ := strings.Cut(m[2], ".")
		modules = append(modules, p+":"+first)
	}
	return files, modules, entities
}

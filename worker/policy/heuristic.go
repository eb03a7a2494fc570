// Package policy holds the agent's policies: heuristic (built in, no
// model), openai (any OpenAI-compatible server) and replay (recorded
// actions).
package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/a2farm/a2farm/lang"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
)

// Heuristic is a seedable baseline that needs no model: it pulls
// identifiers and file names from the issue, searches for them, reads and
// traverses what it finds, and answers with the locations it saw most,
// weighted by their overlap with the issue. Its choices are random (seeded
// by the job's seed, sample and turn), so samples of one issue share
// prefixes and then diverge — what history grouping needs.
type Heuristic struct{}

var (
	camelCase  = regexp.MustCompile(`\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b`)
	snakeCase  = regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b`)
	dotted     = regexp.MustCompile(`\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b`)
	backticked = regexp.MustCompile("`([^`\\n]{2,60})`")
	foundID    = regexp.MustCompile("Found (?:function|class|file) `([^`]+)`")
	treeID     = regexp.MustCompile(`── (\S+:\S+)`)
	plainWord  = regexp.MustCompile(`\b[a-z]{5,}\b`)
)

// Next implements agent.Model.
func (Heuristic) Next(_ context.Context, req agent.ModelRequest) (*agent.ModelReply, error) {
	if len(req.Messages) < 2 {
		return nil, fmt.Errorf("heuristic policy: the conversation has no task")
	}
	issue := agent.ProblemStatement(req.Messages[1].Content)
	st := readState(req.Messages)
	// Draw from the run's seed and the sample index rather than the
	// sample's own seed: the streams of one issue's samples then overlap
	// often enough to share first actions, as history grouping needs.
	seed := schema.RunSeed(req.Seed, req.Sample)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(req.Sample)<<32|uint64(req.Turn)))
	terms := issueTerms(issue, req.Languages)
	budget := 3 + int((uint64(seed)+uint64(req.Sample)*7)%4) // 3..6 tool calls per episode

	if st.calls >= budget || st.lastCall {
		a := answer(st, terms, req.Languages)
		return reply(fmt.Sprintf("I have seen enough to answer.\n%s", a), "finish", map[string]any{"answer": a}), nil
	}
	unread := st.unreadEntities(terms)
	switch {
	case st.calls == 0 || len(st.seen) == 0:
		pick := pickTerms(terms, rng, 1+rng.IntN(3), st.searched)
		if len(pick) == 0 {
			pick = []string{strings.Join(strings.Fields(issue)[:min(6, len(strings.Fields(issue)))], " ")}
		}
		return reply("Let me search for the names the issue mentions.", "search_code_snippets", map[string]any{"search_terms": pick}), nil
	case len(unread) > 0 && rng.Float64() < 0.6:
		n := min(len(unread), 1+rng.IntN(2))
		return reply("Let me read the most relevant code.", "get_entity_contents", map[string]any{"entity_names": unread[:n]}), nil
	case len(st.seen) > 0 && rng.Float64() < 0.5:
		start := st.best(terms, rng)
		dir := []string{"downstream", "upstream"}[rng.IntN(2)]
		return reply("Let me look at what depends on it.", "explore_tree_structure",
			map[string]any{"start_entities": []string{start}, "direction": dir, "traversal_depth": 1}), nil
	default:
		pick := pickTerms(terms, rng, 1+rng.IntN(2), st.searched)
		if len(pick) == 0 {
			return reply("I have seen enough to answer.", "finish", map[string]any{"answer": answer(st, terms, req.Languages)}), nil
		}
		return reply("Let me search further.", "search_code_snippets", map[string]any{"search_terms": pick}), nil
	}
}

func reply(thought, tool string, args map[string]any) *agent.ModelReply {
	data, _ := json.Marshal(args)
	return &agent.ModelReply{Message: llm.Message{Role: "assistant", Content: thought, ToolCalls: []llm.ToolCall{{
		ID: "call_" + tool, Type: "function", Function: llm.FunctionCall{Name: tool, Arguments: string(data)}}}}}
}

// state is what the heuristic knows from the conversation.
type state struct {
	calls    int
	lastCall bool           // the agent asked for the final answer
	seen     map[string]int // surfaced ids -> mentions
	order    []string       // first-seen order
	read     map[string]bool
	searched map[string]bool
}

func readState(msgs []llm.Message) *state {
	st := &state{seen: map[string]int{}, read: map[string]bool{}, searched: map[string]bool{}}
	for i, m := range msgs {
		switch m.Role {
		case "assistant":
			for _, c := range m.ToolCalls {
				st.calls++
				var args map[string]any
				_ = json.Unmarshal([]byte(c.Function.Arguments), &args)
				for _, key := range []string{"entity_names", "search_terms"} {
					list, _ := args[key].([]any)
					for _, v := range list {
						s, _ := v.(string)
						if key == "entity_names" {
							st.read[s] = true
						} else {
							st.searched[s] = true
						}
					}
				}
			}
		case "tool", "user":
			if i < 2 {
				continue
			}
			if strings.Contains(m.Content, "used all tool calls") {
				st.lastCall = true
			}
			for _, re := range []*regexp.Regexp{foundID, treeID} {
				for _, match := range re.FindAllStringSubmatch(m.Content, -1) {
					id := match[1]
					if st.seen[id] == 0 {
						st.order = append(st.order, id)
					}
					st.seen[id]++
				}
			}
		}
	}
	return st
}

// issueTerms are the identifiers, dotted names, code spans and file names
// of the issue, most specific first, then long plain words.
func issueTerms(issue string, l *lang.Set) []string {
	var out []string
	add := func(s string) {
		s = strings.Trim(s, " .()`'\"")
		if len(s) >= 3 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, m := range backticked.FindAllStringSubmatch(issue, -1) {
		if !strings.ContainsAny(m[1], " =(") {
			add(m[1])
		}
	}
	sourceFile := regexp.MustCompile(`[\w/-]+` + l.ExtensionPattern() + `\b`)
	for _, re := range []*regexp.Regexp{sourceFile, dotted, camelCase, snakeCase} {
		for _, m := range re.FindAllString(issue, -1) {
			add(m)
		}
	}
	words := map[string]int{}
	for _, w := range plainWord.FindAllString(strings.ToLower(issue), -1) {
		words[w]++
	}
	var ws []string
	for w := range words {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool {
		if words[ws[i]] != words[ws[j]] {
			return words[ws[i]] > words[ws[j]]
		}
		return ws[i] < ws[j]
	})
	for _, w := range ws[:min(4, len(ws))] {
		add(w)
	}
	return out
}

// pickTerms draws n terms not searched yet, favouring the first ones.
func pickTerms(terms []string, rng *rand.Rand, n int, searched map[string]bool) []string {
	var pool []string
	for _, t := range terms {
		if !searched[t] {
			pool = append(pool, t)
		}
	}
	var out []string
	for len(out) < n && len(pool) > 0 {
		// Triangular choice: earlier (more specific) terms are likelier.
		i := min(rng.IntN(len(pool)), rng.IntN(len(pool)))
		out = append(out, pool[i])
		pool = slices.Delete(pool, i, i+1)
	}
	return out
}

// score ranks a surfaced id: mentions, plus a bonus per issue term its
// name contains.
func (st *state) score(id string, terms []string) float64 {
	s := float64(st.seen[id])
	lower := strings.ToLower(id)
	for _, t := range terms {
		last := strings.ToLower(t[strings.LastIndexAny(t, "./")+1:])
		if len(last) >= 3 && strings.Contains(lower, last) {
			s += 3
		}
	}
	return s
}

func (st *state) ranked(terms []string) []string {
	ids := slices.Clone(st.order)
	slices.SortStableFunc(ids, func(a, b string) int {
		sa, sb := st.score(a, terms), st.score(b, terms)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return ids
}

func (st *state) unreadEntities(terms []string) []string {
	var out []string
	for _, id := range st.ranked(terms) {
		if strings.Contains(id, ":") && !st.read[id] {
			out = append(out, id)
		}
	}
	return out
}

func (st *state) best(terms []string, rng *rand.Rand) string {
	ranked := st.ranked(terms)
	return ranked[rng.IntN(min(3, len(ranked)))]
}

// answer lists up to five files with their best entities, in the format
// the task asks for.
func answer(st *state, terms []string, l *lang.Set) string {
	type fileEntry struct {
		file     string
		entities []string
	}
	var files []fileEntry
	index := map[string]int{}
	for _, id := range st.ranked(terms) {
		file, qual, isEntity := strings.Cut(id, ":")
		if !l.HasExtension(file) {
			continue
		}
		i, ok := index[file]
		if !ok {
			if len(files) == 5 {
				continue
			}
			i = len(files)
			index[file] = i
			files = append(files, fileEntry{file: file})
		}
		if isEntity && len(files[i].entities) < 3 {
			files[i].entities = append(files[i].entities, qual)
		}
	}
	var b strings.Builder
	b.WriteString("```\n")
	for i, f := range files {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(f.file + "\n")
		for _, e := range f.entities {
			b.WriteString("function: " + e + "\n")
		}
	}
	b.WriteString("```")
	return b.String()
}

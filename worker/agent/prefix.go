package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/tools"
)

// callTool runs one tool call of turn turn.
type callTool func(ctx context.Context, turn int, name string, args json.RawMessage) tools.Result

// prefix replays the first turns of a branch from its parent's record.
// The episode loop runs unchanged over them — so its state (the history,
// tool-call count, last-call nudge, request and token deltas) is what the
// parent's was — but each request is checked against the parent's
// recorded request, the reply is the recorded one and each tool call
// returns its recorded observation. No tool runs and nothing is sampled
// before the fork turn. A nil *prefix replays nothing.
type prefix struct {
	parent   *schema.Trajectory
	turns    int                // turns replayed: the fork turn
	requests [][]schema.Message // the parent's requests
	prompts  [][]int32          // the parent's prompt ids
	parts    [][]string         // per replayed turn, its calls' observations
	handed   []int              // per replayed turn, observations handed out
}

func newPrefix(parent *schema.Trajectory, job schema.Job, toolsJSON string) (*prefix, error) {
	f := job.Fork
	switch {
	case parent == nil:
		return nil, fmt.Errorf("branch %s: the record of its parent %s is missing", job.JobID, f.ParentJobID)
	case parent.JobID != f.ParentJobID:
		return nil, fmt.Errorf("branch %s: given the record of %s for its parent %s", job.JobID, parent.JobID, f.ParentJobID)
	case f.Turn < 1 || f.Turn >= int64(len(parent.Turns)):
		return nil, fmt.Errorf("branch %s: fork turn %d is not within its parent's %d turns", job.JobID, f.Turn, len(parent.Turns))
	case parent.ToolsJSON != toolsJSON:
		return nil, fmt.Errorf("branch %s: this worker offers other tools than its parent's episode had (another a2farm version?)", job.JobID)
	}
	requests, err := parent.Requests()
	if err != nil {
		return nil, fmt.Errorf("branch %s: %w", job.JobID, err)
	}
	prompts, err := parent.PromptIDs()
	if err != nil {
		return nil, fmt.Errorf("branch %s: %w", job.JobID, err)
	}
	p := &prefix{parent: parent, turns: int(f.Turn), requests: requests, prompts: prompts,
		parts: make([][]string, f.Turn), handed: make([]int, f.Turn)}
	for t := range p.turns {
		if p.parts[t], err = splitObservation(parent.Turns[t]); err != nil {
			return nil, fmt.Errorf("branch %s: parent turn %d: %w", job.JobID, t, err)
		}
	}
	return p, nil
}

// splitObservation cuts a turn's observation into its calls' parts.
func splitObservation(t schema.Turn) ([]string, error) {
	var out []string
	rest := t.Observation
	for i, n := range t.ObservationParts {
		if i > 0 {
			if !strings.HasPrefix(rest, "\n\n") {
				return nil, fmt.Errorf("observation parts %v do not cut its %d bytes", t.ObservationParts, len(t.Observation))
			}
			rest = rest[2:]
		}
		if n < 0 || n > int64(len(rest)) {
			return nil, fmt.Errorf("observation parts %v do not cut its %d bytes", t.ObservationParts, len(t.Observation))
		}
		out = append(out, rest[:n])
		rest = rest[n:]
	}
	if rest != "" {
		return nil, fmt.Errorf("observation parts %v leave %d of its %d bytes", t.ObservationParts, len(rest), len(t.Observation))
	}
	return out, nil
}

// model answers the replayed turns from the record and the others with
// live.
func (p *prefix) model(live Model) Model { return prefixModel{p, live} }

type prefixModel struct {
	p    *prefix
	live Model
}

func (m prefixModel) Next(ctx context.Context, req ModelRequest) (*ModelReply, error) {
	p := m.p
	if req.Turn >= p.turns {
		return m.live.Next(ctx, req)
	}
	if want := p.requests[req.Turn]; !slices.EqualFunc(req.Messages, want, schema.MessagesEqual) {
		// The parent may have trimmed harder after context overflows:
		// the episode loop retries with harder trims, as it did then.
		return nil, &divergedError{turn: req.Turn, sent: len(req.Messages), recorded: len(want)}
	}
	t := p.parent.Turns[req.Turn]
	return &ModelReply{Message: t.Response(), FinishReason: t.FinishReason, PromptTokens: t.PromptTokens,
		CompletionTokens: t.CompletionTokens, PromptTokenIDs: p.prompts[req.Turn], TokenIDs: t.TokenIDs,
		Logprobs: t.Logprobs}, nil
}

// divergedError is a replayed request that is not the recorded one.
type divergedError struct{ turn, sent, recorded int }

func (e *divergedError) Error() string {
	return fmt.Sprintf("branch replay: turn %d's request (%d messages) is not its parent's recorded request (%d messages)",
		e.turn, e.sent, e.recorded)
}

// ContextOverflow lets the episode loop try the harder trims the parent
// may have sent after overflows; when none matches, this error ends it.
func (e *divergedError) ContextOverflow() bool { return true }

// call answers the replayed turns' tool calls with their recorded
// observations and runs the others with live.
func (p *prefix) call(live callTool) callTool {
	return func(ctx context.Context, turn int, name string, args json.RawMessage) tools.Result {
		if turn >= p.turns {
			return live(ctx, turn, name, args)
		}
		i := p.handed[turn]
		p.handed[turn]++
		if i >= len(p.parts[turn]) {
			return tools.Result{} // reported by consumed
		}
		return tools.Result{Observation: strings.TrimPrefix(p.parts[turn][i], "OBSERVATION:\n")}
	}
}

// consumed checks that a replayed turn executed exactly the calls its
// record holds observations for.
func (p *prefix) consumed(turn int) error {
	if p == nil || turn >= p.turns || p.handed[turn] == len(p.parts[turn]) {
		return nil
	}
	return fmt.Errorf("branch replay: turn %d executed %d tool calls; its parent's record holds %d observations",
		turn, p.handed[turn], len(p.parts[turn]))
}

// recorded is what the trajectory keeps of turn turn: the parent's turn,
// verbatim, for a replayed one; rec otherwise.
func (p *prefix) recorded(turn int, rec schema.Turn) schema.Turn {
	if p == nil || turn >= p.turns {
		return rec
	}
	return p.parent.Turns[turn]
}

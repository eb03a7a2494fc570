package policy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
)

// Replay re-issues the replies of recorded trajectories: turn k of the
// episode for (instance, sample) gets the reply of turn k of the recorded
// trajectory, verbatim, and an episode that outlives its recording ends
// with the recorded answer. Use it for deterministic tests and to branch rollouts
// from a recorded prefix.
type Replay struct {
	byKey map[string]schema.Trajectory
}

// NewReplay indexes trajectories by instance and sample.
func NewReplay(trs []schema.Trajectory) *Replay {
	r := &Replay{byKey: map[string]schema.Trajectory{}}
	for _, tr := range trs {
		r.byKey[replayKey(tr.InstanceID, tr.Sample)] = tr
	}
	return r
}

// LoadReplay reads every *.arrow trajectory file under dir.
func LoadReplay(dir string) (*Replay, error) {
	trs, err := schema.ReadTrajectoryDir(dir)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return NewReplay(trs), nil
}

func replayKey(instance string, sample int64) string { return fmt.Sprintf("%s#%d", instance, sample) }

// Next implements agent.Model.
func (r *Replay) Next(_ context.Context, req agent.ModelRequest) (*agent.ModelReply, error) {
	tr, ok := r.byKey[replayKey(req.InstanceID, req.Sample)]
	if !ok {
		return nil, fmt.Errorf("replay: no recorded trajectory for %s sample %d", req.InstanceID, req.Sample)
	}
	if req.Turn >= len(tr.Turns) {
		// Past the recording: answer as recorded.
		args, _ := json.Marshal(map[string]string{"answer": tr.FinalAnswer})
		return replyWith("", "finish", string(args)), nil
	}
	// The recorded reply, verbatim: content, tool-call ids and argument
	// text, so that the conversation repeats byte for byte.
	t := tr.Turns[req.Turn]
	return &agent.ModelReply{Message: t.Response(), FinishReason: t.FinishReason}, nil
}

func replyWith(content, tool, args string) *agent.ModelReply {
	return &agent.ModelReply{Message: llm.Message{Role: "assistant", Content: content, ToolCalls: []llm.ToolCall{{
		ID: "replay_" + tool, Type: "function", Function: llm.FunctionCall{Name: tool, Arguments: args}}}}}
}

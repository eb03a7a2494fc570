package schema

import (
	"fmt"
	"slices"
)

// RequestDelta expresses a turn's request against what the previous one
// leaves: base is the previous request followed by its reply (nil before
// the first turn). keep is how many leading messages of base the request
// starts with, added the messages after them. Without a context trim the
// request extends base and added holds only the tool results and user
// messages since the reply.
func RequestDelta(base, request []Message) (keep int64, added []Message) {
	n := 0
	for n < len(base) && n < len(request) && MessagesEqual(base[n], request[n]) {
		n++
	}
	return int64(n), slices.Clone(request[n:])
}

// Requests rebuilds every turn's request messages from the deltas. The
// slices share no backing array, so callers may keep or change them.
func (tr Trajectory) Requests() ([][]Message, error) {
	out := make([][]Message, len(tr.Turns))
	var base []Message
	for i, t := range tr.Turns {
		if t.RequestKeep < 0 || t.RequestKeep > int64(len(base)) {
			return nil, fmt.Errorf("trajectory %s turn %d keeps %d messages of %d", tr.JobID, t.Index, t.RequestKeep, len(base))
		}
		req := make([]Message, 0, int(t.RequestKeep)+len(t.RequestAdded))
		req = append(append(req, base[:t.RequestKeep]...), t.RequestAdded...)
		out[i] = req
		base = append(slices.Clip(req), t.Response())
	}
	return out, nil
}

// MessagesEqual reports whether two messages are the same, field by field.
func MessagesEqual(a, b Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Reasoning == b.Reasoning &&
		a.ToolCallID == b.ToolCallID && a.Name == b.Name && slices.Equal(a.ToolCalls, b.ToolCalls)
}

// TokenDelta expresses a prompt's token ids against base, the previous
// turn's prompt and completion ids: keep leading ids of base, then added.
// added is never nil when ids is not, so that "no ids" stays nil.
func TokenDelta(base, ids []int32) (keep int64, added []int32) {
	if ids == nil {
		return 0, nil
	}
	n := 0
	for n < len(base) && n < len(ids) && base[n] == ids[n] {
		n++
	}
	return int64(n), append([]int32{}, ids[n:]...)
}

// PromptIDs rebuilds every turn's prompt token ids from the deltas; a
// turn the server returned no ids for has nil.
func (tr Trajectory) PromptIDs() ([][]int32, error) {
	out := make([][]int32, len(tr.Turns))
	var base []int32
	for i, t := range tr.Turns {
		if t.PromptTokenIDs == nil {
			base = nil
			continue
		}
		if t.PromptTokenKeep < 0 || t.PromptTokenKeep > int64(len(base)) {
			return nil, fmt.Errorf("trajectory %s turn %d keeps %d prompt ids of %d", tr.JobID, t.Index, t.PromptTokenKeep, len(base))
		}
		ids := make([]int32, 0, int(t.PromptTokenKeep)+len(t.PromptTokenIDs))
		ids = append(append(ids, base[:t.PromptTokenKeep]...), t.PromptTokenIDs...)
		out[i] = ids
		base = append(slices.Clip(ids), t.TokenIDs...)
	}
	return out, nil
}

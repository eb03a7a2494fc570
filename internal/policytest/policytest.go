// Package policytest serves a scripted OpenAI-protocol chat-completions
// server for tests and benchmarks: the one stand-in a2farm allows for a
// GPU policy server. Tests only, like natstest.
package policytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2farm/a2farm/schema"
)

// ScriptedServer is a Scripted policy server; it counts the episodes it
// has begun and finished, so that a test can tell whether a worker holds
// episodes at a given moment.
type ScriptedServer struct {
	*httptest.Server
	begun, finished atomic.Int64
}

// Episodes reports how many episodes the server has begun (first calls
// received) and finished (finish replies sent).
func (s *ScriptedServer) Episodes() (begun, finished int64) {
	return s.begun.Load(), s.finished.Load()
}

// Scripted answers every chat completion after delay with the same short
// episode on the built-in sample: two code searches for "Warehouse", then
// finish naming inventory/models.py. The turn is read from the number of
// assistant messages in the request. The server closes with the test.
func Scripted(tb testing.TB, delay time.Duration) *ScriptedServer {
	return ScriptedDelays(tb, func() time.Duration { return delay })
}

// ScriptedDelays is Scripted with a delay drawn for every call, such as
// a GPU server's per-turn latency distribution (delay must be safe for
// concurrent use).
func ScriptedDelays(tb testing.TB, delay func() time.Duration) *ScriptedServer {
	s := &ScriptedServer{}
	s.Server = httptest.NewServer(s.handler(delay))
	tb.Cleanup(s.Close)
	return s
}

// ScriptedHandler is Scripted's handler without a server, for a
// stand-in that runs as a process of its own (the chaos test kills it).
func ScriptedHandler(delay time.Duration) http.Handler {
	return (&ScriptedServer{}).handler(func() time.Duration { return delay })
}

// handler answers chat completions with the scripted episode.
func (s *ScriptedServer) handler(delay func() time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay())
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &req); err != nil {
			http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		turn := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		call := `{"name":"search_code_snippets","arguments":"{\"search_terms\":[\"Warehouse\"]}"}`
		if turn == 0 {
			s.begun.Add(1)
		}
		if turn >= 2 {
			call = `{"name":"finish","arguments":"{\"answer\":\"` + "```\\\\ninventory/models.py\\\\n```" + `\"}"}`
			defer s.finished.Add(1)
		}
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"","tool_calls":[{"id":"c%d","type":"function","function":%s}]}}]}`, turn, call)
	})
}

// Request is what a Recorder's script sees of one chat completion.
type Request struct {
	Model    string           `json:"model"`
	Messages []schema.Message `json:"messages"`
	Tools    json.RawMessage  `json:"tools"`
	Seed     *int64           `json:"seed"`
	Stop     []string         `json:"stop"`
	Logprobs bool             `json:"logprobs"`
}

// Reply is a script's answer. Status other than 0 or 200 answers with
// that HTTP status and Content as the body.
type Reply struct {
	Status            int
	Content           string
	Reasoning         string
	ToolCalls         []schema.ToolCall
	FinishReason      string
	PromptTokens      int64
	PromptTokenIDs    []int32
	CompletionTokenID []int32
	// Logprobs, one per completion id, are returned as vLLM returns them
	// ({"content": [{"token", "logprob"}, ...]}).
	Logprobs []float32
}

// Recorder is an OpenAI-protocol chat-completions server that keeps every
// request body exactly as received and answers with a script. It closes
// with the test.
type Recorder struct {
	// URL is the API root, ending in /v1.
	URL    string
	mu     sync.Mutex
	bodies [][]byte
}

// NewRecorder starts a recording server; script is called for every
// request (concurrently: it must be safe for that).
func NewRecorder(tb testing.TB, script func(Request) Reply) *Recorder {
	rec := &Recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var req Request
		if err := json.Unmarshal(data, &req); err != nil {
			http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.bodies = append(rec.bodies, data)
		rec.mu.Unlock()
		reply := script(req)
		if reply.Status != 0 && reply.Status != http.StatusOK {
			http.Error(w, reply.Content, reply.Status)
			return
		}
		msg := map[string]any{"role": "assistant", "content": reply.Content}
		if reply.Reasoning != "" {
			msg["reasoning_content"] = reply.Reasoning
		}
		if len(reply.ToolCalls) > 0 {
			msg["tool_calls"] = reply.ToolCalls
		}
		choice := map[string]any{"index": 0, "message": msg, "finish_reason": reply.FinishReason}
		if reply.CompletionTokenID != nil {
			choice["token_ids"] = reply.CompletionTokenID
		}
		if reply.Logprobs != nil {
			content := make([]map[string]any, len(reply.Logprobs))
			for i, lp := range reply.Logprobs {
				content[i] = map[string]any{"token": fmt.Sprintf("t%d", i), "logprob": lp}
			}
			choice["logprobs"] = map[string]any{"content": content}
		}
		body := map[string]any{"id": "chatcmpl-test", "model": req.Model, "choices": []any{choice},
			"usage": map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": len(reply.CompletionTokenID)}}
		if reply.PromptTokenIDs != nil {
			body["prompt_token_ids"] = reply.PromptTokenIDs
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	tb.Cleanup(srv.Close)
	rec.URL = srv.URL + "/v1"
	return rec
}

// Bodies returns the request bodies received so far, in arrival order.
func (r *Recorder) Bodies() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bodies)
}

// Reset forgets the bodies received so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = nil
}

// Template is a toy chat template over byte tokens, to test token
// capture: a message renders as [1, role, bytes of its reasoning, content
// and tool calls..., 2] and a prompt ends with [1, assistant], so a reply's
// completion ids are the bytes of its reasoning, content and tool calls,
// then 2. A conversation that sends replies back verbatim therefore
// renders each prompt as the previous prompt and completion followed by
// the new messages. With StripReasoning the history renders assistant
// messages without their reasoning (as Qwen3's template does), which
// breaks that prefix after a reply with reasoning.
//
// BytesPerToken > 1 makes a token of every run of that many bytes of a
// message's text (a rough stand-in for a BPE tokenizer's ~4 bytes per
// token, for size measurements); runs never cross message boundaries, so
// the prefix property holds as before.
type Template struct {
	StripReasoning bool
	BytesPerToken  int
}

var roleIDs = map[string]int32{"system": 3, "user": 4, "assistant": 5, "tool": 6}

// Prompt renders the messages of a request.
func (t Template) Prompt(msgs []schema.Message) []int32 {
	var ids []int32
	for _, m := range msgs {
		ids = append(ids, 1, roleIDs[m.Role])
		text := m.Content + toolCallText(m.ToolCalls)
		if !t.StripReasoning || m.Role != "assistant" {
			text = m.Reasoning + text
		}
		ids = append(t.appendText(ids, text), 2)
	}
	return append(ids, 1, roleIDs["assistant"])
}

// Completion renders a reply as the tokens it was generated as.
func (t Template) Completion(r Reply) []int32 {
	return append(t.appendText(nil, r.Reasoning+r.Content+toolCallText(r.ToolCalls)), 2)
}

func toolCallText(calls []schema.ToolCall) string {
	if len(calls) == 0 {
		return ""
	}
	data, _ := json.Marshal(calls)
	return string(data)
}

func (t Template) appendText(ids []int32, s string) []int32 {
	n := max(1, t.BytesPerToken)
	for i := 0; i < len(s); i += n {
		var id int32 = 10
		for _, c := range []byte(s[i:min(i+n, len(s))]) {
			id = id*31 + int32(c)
		}
		ids = append(ids, id&0x7fffffff)
	}
	return ids
}

package policy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/repoindex"
	"github.com/a2farm/a2farm/worker/tools"
)

// chatRequest is what the stand-in server reads from a request.
type chatRequest struct {
	Messages []llm.Message   `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
	Stop     []string        `json:"stop"`
	TopK     int             `json:"top_k"`
	RepPen   float64         `json:"repetition_penalty"`
	Seed     *int64          `json:"seed"`
}

// policyServer stands in for vLLM: respond gets the parsed request and
// the number of assistant turns so far, and writes the answer.
func policyServer(t *testing.T, respond func(w http.ResponseWriter, req chatRequest, turn int)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var req chatRequest
		if err := json.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		turn := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		respond(w, req, turn)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func answerWith(w http.ResponseWriter, msg map[string]any, extra map[string]any) {
	choice := map[string]any{"index": 0, "finish_reason": "stop", "message": msg}
	for k, v := range extra {
		choice[k] = v
	}
	json.NewEncoder(w).Encode(map[string]any{"id": "x", "choices": []any{choice},
		"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
}

func toolCall(name, args string) map[string]any {
	return map[string]any{"role": "assistant", "content": "",
		"tool_calls": []any{map[string]any{"id": "c-" + name, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}
}

type fixture struct {
	idx  *repoindex.Index
	inst schema.Instance
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	repos := gitrepo.NewSet(l.ReposDir)
	t.Cleanup(func() { repos.Close() })
	inst := l.Instances[0]
	idx, err := repoindex.Build(context.Background(), repos, inst.Repo, inst.BaseCommit, repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	return fixture{idx, inst}
}

func (f fixture) run(t *testing.T, srv *httptest.Server, clientCfg llm.Config, cfg agent.Config, pol schema.Policy, sampling schema.Sampling) schema.Trajectory {
	t.Helper()
	tr, err := f.play(srv, clientCfg, cfg, pol, sampling)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// play plays one episode against srv with the client's settings.
func (f fixture) play(srv *httptest.Server, clientCfg llm.Config, cfg agent.Config, pol schema.Policy, sampling schema.Sampling) (schema.Trajectory, error) {
	if clientCfg.Backoff == 0 {
		clientCfg.Backoff = time.Millisecond
	}
	replicas, err := newReplicas("qwen", []string{srv.URL + "/v1"}, EndpointConfig{RequestTimeout: clientCfg.Timeout,
		MaxRetries: clientCfg.MaxRetries, RetryBackoff: clientCfg.Backoff})
	if err != nil {
		return schema.Trajectory{}, err
	}
	pol.Kind, pol.Model = schema.PolicyOpenAI, "qwen"
	sampling.Seed = schema.SampleSeed(7, 3)
	job := schema.Job{JobID: "r/0/" + f.inst.InstanceID + "/3", InstanceID: f.inst.InstanceID, Repo: f.inst.Repo,
		ProblemStatement: f.inst.ProblemStatement, Sample: 3, Policy: pol, Sampling: sampling}
	model, err := NewOpenAI(replicas, EpisodeID(job), pol, sampling)
	if err != nil {
		return schema.Trajectory{}, err
	}
	defer model.Close()
	set, err := tools.New(f.idx, tools.Options{ProblemStatement: f.inst.ProblemStatement})
	if err != nil {
		return schema.Trajectory{}, err
	}
	return agent.Run(context.Background(), cfg, agent.Episode{Job: job, Tools: set, Graph: f.idx.Graph, Model: model})
}

const goodAnswer = "```\\ninventory/models.py\\nfunction: Warehouse.remove_item\\n```"

// TestOpenAINativeToolCalls walks an episode with native tool calls,
// including invalid JSON arguments and an unknown tool, and checks what
// the trajectory records.
func TestOpenAINativeToolCalls(t *testing.T) {
	f := newFixture(t)
	var sawTools, sawSampling atomic.Bool
	srv := policyServer(t, func(w http.ResponseWriter, req chatRequest, turn int) {
		sawTools.Store(len(req.Tools) > 0)
		sawSampling.Store(req.TopK == 20 && req.RepPen == 1.05 && req.Seed != nil)
		switch turn {
		case 0:
			answerWith(w, toolCall("search_code_snippets", `{"search_terms": ["remove_item"]}`),
				map[string]any{"logprobs": map[string]any{"content": []any{map[string]any{"token": "a", "logprob": -0.5}}}, "token_ids": []int{5, 6}})
		case 1:
			answerWith(w, toolCall("get_entity_contents", `{"entity_names": [inventory/models.py`), nil) // broken JSON
		case 2:
			answerWith(w, toolCall("rm_rf", `{}`), nil)
		default:
			answerWith(w, toolCall("finish", `{"answer": "`+goodAnswer+`"}`), nil)
		}
	})
	tr := f.run(t, srv, llm.Config{}, agent.Config{}, schema.Policy{Logprobs: true}, schema.Sampling{Temperature: 1, TopP: 0.8, TopK: 20, RepetitionPenalty: 1.05})
	if tr.Status != schema.StatusOK || len(tr.Turns) != 4 {
		t.Fatalf("status %s, %d turns: %+v", tr.Status, len(tr.Turns), tr)
	}
	if !sawTools.Load() || !sawSampling.Load() {
		t.Error("the request lacked tools or the vLLM sampling fields")
	}
	first := tr.Turns[0]
	if first.ActionKey != `search_code_snippets{"search_terms":["remove_item"]}` || !strings.Contains(first.Observation, "OBSERVATION:") ||
		len(first.Surfaced.Entities) == 0 || first.PromptTokens != 100 || len(first.Logprobs) != 1 || len(first.TokenIDs) != 2 {
		t.Errorf("first turn = %+v", first)
	}
	if !strings.Contains(tr.Turns[1].Observation, "must be a JSON object") || !strings.Contains(tr.Turns[2].Observation, "Unknown tool `rm_rf`") {
		t.Errorf("bad calls were not explained: %q / %q", tr.Turns[1].Observation, tr.Turns[2].Observation)
	}
	if tr.PromptTokens != 400 || tr.CompletionTokens != 40 {
		t.Errorf("token totals %d/%d", tr.PromptTokens, tr.CompletionTokens)
	}
	if got := tr.Predictions.Entities; len(got) != 1 || got[0] != "inventory/models.py:Warehouse.remove_item" {
		t.Errorf("predictions = %+v", tr.Predictions)
	}
}

func TestOpenAITextMode(t *testing.T) {
	f := newFixture(t)
	srv := policyServer(t, func(w http.ResponseWriter, req chatRequest, turn int) {
		if len(req.Tools) > 0 || len(req.Stop) == 0 || !strings.Contains(req.Messages[0].Content, "BEGIN FUNCTION #1") {
			http.Error(w, "text mode must describe tools in the system message and stop at </function", http.StatusBadRequest)
			return
		}
		if turn == 0 {
			// the stop word cut the closing tag
			answerWith(w, map[string]any{"role": "assistant", "content": "Searching.\n<function=search_code_snippets>\n<parameter=search_terms>['remove_item', 'Warehouse']</parameter>\n"}, nil)
			return
		}
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "EXECUTION RESULT of [search_code_snippets]") {
			answerWith(w, map[string]any{"role": "assistant", "content": "<function=finish>\n<parameter=answer>```\ninventory/models.py\nfunction: Warehouse.remove_item\n```</parameter>\n"}, nil)
			return
		}
		http.Error(w, "unexpected conversation", http.StatusBadRequest)
	})
	tr := f.run(t, srv, llm.Config{}, agent.Config{TextMode: true}, schema.Policy{}, schema.Sampling{})
	if tr.Status != schema.StatusOK || len(tr.Turns) != 2 || tr.Turns[0].ToolArgs != `{"search_terms":["remove_item","Warehouse"]}` {
		t.Fatalf("trajectory: %+v", tr)
	}
	if len(tr.Predictions.Entities) != 1 {
		t.Errorf("predictions = %+v", tr.Predictions)
	}
}

func TestOpenAIRecoversFromTransientErrors(t *testing.T) {
	f := newFixture(t)
	var calls atomic.Int32
	srv := policyServer(t, func(w http.ResponseWriter, req chatRequest, turn int) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "rate limited", http.StatusTooManyRequests)
		case 2:
			http.Error(w, "upstream", http.StatusBadGateway)
		default:
			answerWith(w, toolCall("finish", `{"answer": "`+goodAnswer+`"}`), nil)
		}
	})
	tr := f.run(t, srv, llm.Config{}, agent.Config{}, schema.Policy{}, schema.Sampling{})
	if tr.Status != schema.StatusOK || calls.Load() != 3 {
		t.Errorf("status %s after %d calls", tr.Status, calls.Load())
	}
}

// TestOpenAITimeoutsAreOutages: a server that never answers in time says
// nothing of the policy — the episode is abandoned with ErrUnavailable,
// no trajectory is made of it — while a request the server refuses is
// the policy's own failure.
func TestOpenAITimeoutsAreOutages(t *testing.T) {
	f := newFixture(t)
	srv := policyServer(t, func(w http.ResponseWriter, _ chatRequest, _ int) { time.Sleep(300 * time.Millisecond) })
	_, err := f.play(srv, llm.Config{Timeout: 30 * time.Millisecond, MaxRetries: 1}, agent.Config{}, schema.Policy{}, schema.Sampling{})
	if !errors.Is(err, agent.ErrUnavailable) || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("error %v; want the policy unavailable after timeouts", err)
	}
	refuses := policyServer(t, func(w http.ResponseWriter, _ chatRequest, _ int) {
		http.Error(w, `{"error": {"message": "unknown field"}}`, http.StatusBadRequest)
	})
	tr := f.run(t, refuses, llm.Config{}, agent.Config{}, schema.Policy{}, schema.Sampling{})
	if tr.Status != schema.StatusPolicyError || !strings.Contains(tr.Error, "400") {
		t.Errorf("status %s, error %q; want policy_error from a refused request", tr.Status, tr.Error)
	}
}

// TestOpenAIContextOverflowTrims: the server rejects long conversations;
// the agent re-sends with fewer messages and the episode goes on.
func TestOpenAIContextOverflowTrims(t *testing.T) {
	f := newFixture(t)
	var rejected, served atomic.Int32
	var sawPlaceholder atomic.Bool
	srv := policyServer(t, func(w http.ResponseWriter, req chatRequest, _ int) {
		if len(req.Messages) > 7 {
			rejected.Add(1)
			http.Error(w, `{"error": {"message": "This model's maximum context length is 4096 tokens"}}`, http.StatusBadRequest)
			return
		}
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "earlier exploration messages were removed") {
				sawPlaceholder.Store(true)
			}
		}
		if served.Add(1) > 5 {
			answerWith(w, toolCall("finish", `{"answer": "`+goodAnswer+`"}`), nil)
			return
		}
		answerWith(w, toolCall("search_code_snippets", `{"search_terms": ["term`+string(rune('a'+served.Load()))+`"]}`), nil)
	})
	tr := f.run(t, srv, llm.Config{}, agent.Config{}, schema.Policy{}, schema.Sampling{})
	if tr.Status != schema.StatusOK || rejected.Load() == 0 || !sawPlaceholder.Load() || len(tr.Turns) != 6 {
		t.Errorf("status %s (%s), %d rejections, placeholder %v, %d turns", tr.Status, tr.Error, rejected.Load(), sawPlaceholder.Load(), len(tr.Turns))
	}
}

// TestOpenAIEmptyAnswerFallsBack: an empty finish answer is replaced by
// the files the agent asked the tools about.
func TestOpenAIEmptyAnswerFallsBack(t *testing.T) {
	f := newFixture(t)
	srv := policyServer(t, func(w http.ResponseWriter, _ chatRequest, turn int) {
		if turn == 0 {
			answerWith(w, toolCall("get_entity_contents", `{"entity_names": ["inventory/models.py:Warehouse.remove_item"]}`), nil)
			return
		}
		answerWith(w, toolCall("finish", `{"answer": ""}`), nil)
	})
	tr := f.run(t, srv, llm.Config{}, agent.Config{}, schema.Policy{}, schema.Sampling{})
	if tr.Status != schema.StatusOK || len(tr.Predictions.Files) != 1 || tr.Predictions.Files[0] != "inventory/models.py" {
		t.Errorf("status %s, answer %q, predictions %+v", tr.Status, tr.FinalAnswer, tr.Predictions)
	}
}

func TestOpenAIToolBudget(t *testing.T) {
	f := newFixture(t)
	var lastCallSeen atomic.Bool
	srv := policyServer(t, func(w http.ResponseWriter, req chatRequest, turn int) {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "used all tool calls") {
			lastCallSeen.Store(true)
		}
		answerWith(w, toolCall("explore_tree_structure", `{"start_entities": ["/"]}`), nil) // never finishes
	})
	tr := f.run(t, srv, llm.Config{}, agent.Config{MaxToolCalls: 3}, schema.Policy{}, schema.Sampling{})
	if tr.Status != schema.StatusTruncated || len(tr.Turns) != 4 || !lastCallSeen.Load() || tr.Turns[3].Observation != "" {
		t.Errorf("status %s, %d turns, last call seen %v; want truncated after 3 calls + 1 answer turn", tr.Status, len(tr.Turns), lastCallSeen.Load())
	}
}

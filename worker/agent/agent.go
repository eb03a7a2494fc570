package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/a2farm/a2farm/lang"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/tools"
)

// Model is the policy: given the conversation so far, the next assistant
// message. An error wrapping ErrUnavailable says the policy could not be
// reached; any other error is the policy's own failure.
type Model interface {
	Next(ctx context.Context, req ModelRequest) (*ModelReply, error)
}

// ErrUnavailable marks a model that could not be reached (every server
// down or overloaded): the episode is abandoned, not recorded, because an
// outage says nothing of the policy. Run returns it as an error.
var ErrUnavailable = errors.New("policy unavailable")

// ModelRequest is what the policy sees at one turn.
type ModelRequest struct {
	Messages []llm.Message
	// Tools are the OpenAI tool specs; in text mode they are described in
	// the system message instead and Tools is nil.
	Tools      []schema.ToolSpec
	InstanceID string
	Sample     int64
	// Seed is the sample's seed (the job's Sampling.Seed).
	Seed int64
	Turn int
	// TextMode says the tools are described in the system message and
	// calls are expected in the <function=...> syntax.
	TextMode bool
	// Languages are the repository's languages, for built-in policies that
	// read paths out of text as a model would.
	Languages *lang.Set
}

// ModelReply is one assistant message, exactly as the policy returned it,
// and its accounting.
type ModelReply struct {
	Message                        llm.Message
	FinishReason                   string
	PromptTokens, CompletionTokens int64
	// PromptTokenIDs and TokenIDs are the server's tokens of the request
	// and of the completion, when it returns them.
	PromptTokenIDs, TokenIDs []int32
	Logprobs                 []float32
	// Replica names the server that answered, when the model has several.
	Replica string
}

// Config bounds an episode.
type Config struct {
	// MaxToolCalls ends exploration (default 20); the model then gets one
	// more turn to answer.
	MaxToolCalls int
	// MaxContextTokens is the model's context; older observations are
	// trimmed from what is sent past 70% of it (default 40,000).
	MaxContextTokens int
	// TextMode describes the tools in the system message and parses
	// <function=...> calls from the reply, for servers without a tool parser.
	TextMode bool
	// WallTime bounds the episode (0: none).
	WallTime time.Duration
}

// JobConfig is the episode configuration a job asks for: its limits and
// whether its policy runs in text mode.
func JobConfig(job schema.Job) Config {
	return Config{
		MaxToolCalls:     int(job.Limits.MaxToolCalls),
		MaxContextTokens: int(job.Limits.MaxContextTokens),
		TextMode:         job.Policy.TextMode,
		WallTime:         time.Duration(job.Limits.WallTimeSeconds) * time.Second,
	}
}

func (c Config) withDefaults() Config {
	if c.MaxToolCalls <= 0 {
		c.MaxToolCalls = 20
	}
	if c.MaxContextTokens <= 0 {
		c.MaxContextTokens = 40000
	}
	return c
}

// Episode is one rollout to run.
type Episode struct {
	Job   schema.Job
	Tools *tools.Set
	Graph *codegraph.Graph
	Model Model
	// Parent is the recorded trajectory a branch (Job.Fork) starts from;
	// nil for a base sample.
	Parent *schema.Trajectory
	// Hooks for tests and metrics; nil is fine.
	OnTurn func(schema.Turn)
}

// Run plays one episode and returns its trajectory. Only a context
// cancellation and an unreachable model (ErrUnavailable) are returned as
// errors; policy failures and timeouts end up in the trajectory's status.
func Run(ctx context.Context, cfg Config, ep Episode) (schema.Trajectory, error) {
	cfg = cfg.withDefaults()
	job := ep.Job
	syntax := newPathSyntax(ep.Graph.Languages())
	tr := job.Trajectory(schema.StatusOK)
	tr.StartedAt = time.Now().UTC()
	if served, ok := ep.Model.(interface{ Endpoint() string }); ok {
		tr.Policy.Endpoint = served.Endpoint()
	}
	if cfg.WallTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.WallTime)
		defer cancel()
	}
	specs := make([]schema.ToolSpec, 0)
	for _, t := range ep.Tools.Tools() {
		specs = append(specs, t.Spec())
	}
	pkg := schema.Instance{InstanceID: job.InstanceID}.PackageName()
	msgs := []llm.Message{
		{Role: "system", Content: systemPrompt},
		{Role: "user", Content: userPrompt(pkg, job.ProblemStatement, promptSample(job))},
	}
	if data, err := json.Marshal(specs); err == nil {
		tr.ToolsJSON = string(data)
	}
	model := ep.Model
	call := func(ctx context.Context, _ int, name string, args json.RawMessage) tools.Result {
		return ep.Tools.Call(ctx, name, args)
	}
	var prefix *prefix
	if job.Fork.IsBranch() {
		var err error
		if prefix, err = newPrefix(ep.Parent, job, tr.ToolsJSON); err != nil {
			tr.Status, tr.Error, tr.FinishedAt = schema.StatusInfraError, err.Error(), time.Now().UTC()
			return tr, nil
		}
		model, call = prefix.model(model), prefix.call(call)
	}
	var toolCalls int
	var answer string
	finished, nudged := false, false
	lastPrompt := int64(0)
	// base is the previous request followed by its reply: each turn's
	// request is recorded as a delta against it.
	var base []llm.Message
	var baseIDs []int32 // the previous prompt and completion ids, likewise
	for turn := 0; !finished; turn++ {
		if toolCalls >= cfg.MaxToolCalls {
			if nudged {
				tr.Status = schema.StatusTruncated
				break
			}
			msgs = append(msgs, llm.Message{Role: "user", Content: lastCall})
			nudged = true
		}
		start := time.Now()
		sent, reply, err := next(ctx, model, cfg, msgs, lastPrompt, ModelRequest{InstanceID: job.InstanceID,
			Sample: job.Sample, Seed: job.Sampling.Seed, Turn: turn, TextMode: cfg.TextMode, Languages: syntax.lang}, specs)
		latency := time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) && cfg.WallTime > 0 {
					tr.Status, tr.Error = schema.StatusTimeout, "episode wall time exceeded"
					break
				}
				return tr, ctx.Err()
			}
			if errors.Is(err, ErrUnavailable) {
				return tr, err
			}
			tr.Status, tr.Error = schema.StatusPolicyError, err.Error()
			if prefix != nil && turn < prefix.turns {
				tr.Status = schema.StatusInfraError // the record, not the policy
			}
			break
		}
		lastPrompt = reply.PromptTokens
		tr.PromptTokens += reply.PromptTokens
		tr.CompletionTokens += reply.CompletionTokens
		msg := reply.Message
		msg.Role = "assistant"
		turnRec := schema.Turn{
			Index: int64(turn), AssistantContent: msg.Content, Reasoning: msg.Reasoning, ToolCalls: msg.ToolCalls,
			FinishReason: reply.FinishReason, PromptTokens: reply.PromptTokens,
			CompletionTokens: reply.CompletionTokens, PolicyLatencyMS: ms(latency), Replica: reply.Replica,
			TokenIDs: reply.TokenIDs, Logprobs: reply.Logprobs,
		}
		turnRec.PromptTokenKeep, turnRec.PromptTokenIDs = schema.TokenDelta(baseIDs, reply.PromptTokenIDs)
		baseIDs = nil
		if reply.PromptTokenIDs != nil {
			baseIDs = append(reply.PromptTokenIDs[:len(reply.PromptTokenIDs):len(reply.PromptTokenIDs)], reply.TokenIDs...)
		}
		turnRec.RequestKeep, turnRec.RequestAdded = schema.RequestDelta(base, sent)
		// The reply goes back into the history exactly as it came, so that
		// the server's chat template renders it as the tokens it generated.
		msg = turnRec.Response()
		base = append(sent, msg)
		calls := msg.ToolCalls
		if cfg.TextMode || len(calls) == 0 {
			if tc, ok := parseTextCall(msg.Content, schemaType(ep.Tools)); ok {
				args, _ := json.Marshal(tc.args)
				calls = []llm.ToolCall{{ID: fmt.Sprintf("call_%d", turn), Type: "function",
					Function: llm.FunctionCall{Name: tc.name, Arguments: string(args)}}}
			}
		}
		msgs = append(msgs, msg)
		if len(calls) == 0 {
			if a, ok := syntax.plainAnswer(msg.Content); ok {
				answer, finished = a, true
			} else {
				msgs = append(msgs, llm.Message{Role: "user", Content: keepGoing})
			}
			if err := prefix.consumed(turn); err != nil {
				tr.Status, tr.Error = schema.StatusInfraError, err.Error()
				break
			}
			tr.Turns = append(tr.Turns, record(prefix.recorded(turn, turnRec), ep.OnTurn))
			continue
		}
		var observations []string
		var surfaced schema.Locations
		toolStart := time.Now()
		for i, c := range calls {
			args := canonicalArgs(c.Function.Arguments)
			if i == 0 {
				turnRec.ToolName, turnRec.ToolArgs = c.Function.Name, args
				turnRec.ActionKey = c.Function.Name + args
			}
			if nudged && c.Function.Name != tools.Finish {
				continue // the answer turn: no more exploration
			}
			res := call(ctx, turn, c.Function.Name, json.RawMessage(c.Function.Arguments))
			if res.Finish {
				answer, finished = res.Answer, true
				break
			}
			toolCalls++
			obs := "OBSERVATION:\n" + res.Observation
			observations = append(observations, obs)
			turnRec.ObservationParts = append(turnRec.ObservationParts, int64(len(obs)))
			surfaced = mergeLocations(surfaced, res.Surfaced)
			if cfg.TextMode {
				msgs = append(msgs, llm.Message{Role: "user", Content: "EXECUTION RESULT of [" + c.Function.Name + "]:\n" + obs})
			} else {
				msgs = append(msgs, llm.Message{Role: "tool", Content: obs, ToolCallID: c.ID, Name: c.Function.Name})
			}
		}
		turnRec.ToolLatencyMS = ms(time.Since(toolStart))
		turnRec.Observation = strings.Join(observations, "\n\n")
		turnRec.ObservationChars = int64(len([]rune(turnRec.Observation)))
		turnRec.Surfaced = surfaced
		if err := prefix.consumed(turn); err != nil {
			tr.Status, tr.Error = schema.StatusInfraError, err.Error()
			break
		}
		tr.Turns = append(tr.Turns, record(prefix.recorded(turn, turnRec), ep.OnTurn))
	}
	if strings.TrimSpace(answer) == "" || !syntax.inText.MatchString(answer) {
		answer = syntax.fallbackAnswer(answer, msgs)
	}
	tr.FinalAnswer = answer
	tr.Predictions = parseAnswer(answer, ep.Graph, syntax)
	tr.FinishedAt = time.Now().UTC()
	return tr, nil
}

// promptSample is the sample whose task prompt the episode gets: a
// branch continues its parent's conversation, hint included.
func promptSample(job schema.Job) int64 {
	if job.Fork.IsBranch() {
		return job.Fork.ParentSample
	}
	return job.Sample
}

// maxOverflowRetries bounds re-sends after the server reports a context
// overflow; each retry keeps fewer recent messages.
const maxOverflowRetries = 5

// next asks the model for the next message, trimming harder each time the
// server reports that the request exceeds its context. It returns the
// messages of the request that was answered.
func next(ctx context.Context, m Model, cfg Config, msgs []llm.Message, lastPrompt int64, req ModelRequest, specs []schema.ToolSpec) ([]llm.Message, *ModelReply, error) {
	for level := 0; ; level++ {
		req.Messages = trimLevel(msgs, lastPrompt, cfg.MaxContextTokens, level)
		if cfg.TextMode {
			req.Messages[0].Content += TextToolInstructions(specs)
		} else {
			req.Tools = specs
		}
		reply, err := m.Next(ctx, req)
		var overflow interface{ ContextOverflow() bool }
		if err != nil && errors.As(err, &overflow) && overflow.ContextOverflow() && level < maxOverflowRetries {
			continue
		}
		return req.Messages, reply, err
	}
}

func record(t schema.Turn, hook func(schema.Turn)) schema.Turn {
	if hook != nil {
		hook(t)
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// canonicalArgs re-encodes JSON arguments with sorted keys, the identity of
// an action; unparsable arguments are kept as written.
func canonicalArgs(raw string) string {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return string(out)
}

func mergeLocations(a, b schema.Locations) schema.Locations {
	merge := func(x, y []string) []string {
		for _, id := range y {
			if !slices.Contains(x, id) {
				x = append(x, id)
			}
		}
		return x
	}
	return schema.Locations{Files: merge(a.Files, b.Files), Modules: merge(a.Modules, b.Modules), Entities: merge(a.Entities, b.Entities)}
}

// schemaType reports the JSON type of a tool parameter, for text calls.
func schemaType(set *tools.Set) func(tool, param string) string {
	types := map[string]string{}
	for _, t := range set.Tools() {
		var s struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(t.Parameters, &s)
		for p, def := range s.Properties {
			switch v := def.Type.(type) {
			case string:
				types[t.Name+"."+p] = v
			case []any:
				if len(v) > 0 {
					types[t.Name+"."+p], _ = v[0].(string)
				}
			}
		}
	}
	return func(tool, param string) string { return types[tool+"."+param] }
}

var finishTag = regexp.MustCompile(`(?s)<finish>.*?</finish>`)

// plainAnswer recognises a reply without a tool call that still answers:
// a <finish>...</finish> span (the answer is the rest of the reply) or a
// fenced block naming a source path (the answer is the whole reply).
func (ps *pathSyntax) plainAnswer(content string) (string, bool) {
	if finishTag.MatchString(content) {
		return strings.TrimSpace(finishTag.ReplaceAllString(content, "")), true
	}
	if ps.fenced.MatchString(content) {
		return content, true
	}
	return "", false
}

// fallbackAnswer applies the reference's answer fallback: the latest
// assistant text naming a path, else the source paths the agent asked
// tools about, most recent first.
func (ps *pathSyntax) fallbackAnswer(answer string, msgs []llm.Message) string {
	var tail strings.Builder
	tail.WriteString(answer)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "assistant" {
			continue
		}
		text := msgs[i].Content + "\n" + tail.String()
		if ps.inText.MatchString(text) {
			return text
		}
		tail.Reset()
		tail.WriteString(text)
	}
	var paths []string
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, c := range msgs[i].ToolCalls {
			switch c.Function.Name {
			case tools.GetEntityContents, tools.SearchCodeSnippets, tools.ViewSummary:
				for _, p := range ps.inText.FindAllString(c.Function.Arguments, -1) {
					if !slices.Contains(paths, p) {
						paths = append(paths, p)
					}
				}
			}
		}
	}
	if len(paths) == 0 {
		return answer
	}
	return "```\n" + strings.Join(paths, "\n") + "\n```"
}

// trimLevel drops old exploration from what is sent once the conversation
// nears the context limit: the system and task messages stay, a note
// replaces the middle, and the last six messages (without leading tool
// results) follow. lastPrompt is the server's count for the previous
// request, when it reported one. After level context-overflow errors it
// always trims, keeping max(2, 6 - 2·level) messages, as the reference
// retries.
func trimLevel(msgs []llm.Message, lastPrompt int64, maxTokens, level int) []llm.Message {
	out := slices.Clone(msgs)
	keep := 6
	if level > 0 {
		keep = max(2, 6-2*level)
	}
	fits := level == 0 && estimateTokens(out, lastPrompt) <= int64(float64(maxTokens)*0.7)
	if fits || len(out) <= keep+2 {
		return out
	}
	tail := out[len(out)-keep:]
	for len(tail) > 0 && tail[0].Role == "tool" {
		tail = tail[1:]
	}
	removed := len(out) - 2 - len(tail)
	kept := append([]llm.Message{out[0], out[1], {Role: "user",
		Content: fmt.Sprintf("[%d earlier exploration messages were removed to fit the context window.]", removed)}}, tail...)
	return kept
}

// estimateTokens: about four characters a token plus per-message overhead,
// with a 15% margin.
func estimateTokens(msgs []llm.Message, lastPrompt int64) int64 {
	n := 0
	for _, m := range msgs {
		n += 4 + len(m.Content)/4
		for _, c := range m.ToolCalls {
			n += (len(c.Function.Name) + len(c.Function.Arguments)) / 4
		}
	}
	est := int64(float64(n) * 1.15)
	return max(est, lastPrompt)
}

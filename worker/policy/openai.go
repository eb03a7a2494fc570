package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/worker/agent"
)

// OpenAIConfig configures the openai policy.
type OpenAIConfig struct {
	Client *llm.Client
	Model  string
	// Sampling. Zero TopP, TopK and RepetitionPenalty are not sent.
	Temperature       float64
	TopP              float64
	TopK              int
	RepetitionPenalty float64
	MaxTokens         int
	// Logprobs asks the server for per-token log-probabilities (and, on
	// vLLM, token ids) so they are recorded in the trajectory.
	Logprobs bool
}

// OpenAI is the policy served by any OpenAI-compatible endpoint (vLLM,
// SGLang, OpenAI): native tool calls, or the text <function=...> syntax
// in text mode. It is safe for concurrent use.
type OpenAI struct {
	cfg OpenAIConfig
}

// NewOpenAI validates cfg.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("openai policy: a client is required")
	case cfg.Model == "":
		return nil, errors.New("openai policy: a model name is required (--model)")
	case cfg.Temperature < 0 || cfg.TopP < 0 || cfg.TopP > 1 || cfg.TopK < 0 || cfg.RepetitionPenalty < 0:
		return nil, fmt.Errorf("openai policy: bad sampling parameters %+v", cfg)
	}
	return &OpenAI{cfg: cfg}, nil
}

// Next implements agent.Model.
func (o *OpenAI) Next(ctx context.Context, req agent.ModelRequest) (*agent.ModelReply, error) {
	temp := o.cfg.Temperature
	r := llm.Request{Model: o.cfg.Model, Messages: req.Messages, Temperature: &temp, MaxTokens: o.cfg.MaxTokens,
		Extra: map[string]any{}}
	if o.cfg.TopP > 0 {
		topP := o.cfg.TopP
		r.TopP = &topP
	}
	if o.cfg.TopK > 0 {
		r.Extra["top_k"] = o.cfg.TopK
	}
	if o.cfg.RepetitionPenalty > 0 {
		r.Extra["repetition_penalty"] = o.cfg.RepetitionPenalty
	}
	// One seed per (job seed, sample, turn): reproducible, yet samples differ.
	seed := req.Seed*1_000_003 + req.Sample*1009 + int64(req.Turn)
	r.Seed = &seed
	if o.cfg.Logprobs {
		r.Extra["logprobs"] = true
		r.Extra["return_token_ids"] = true
	}
	if req.TextMode {
		r.Stop = []string{"</function"}
	} else if len(req.Tools) > 0 {
		tools, err := json.Marshal(req.Tools)
		if err != nil {
			return nil, err
		}
		r.Tools = tools
	}
	resp, err := o.cfg.Client.Chat(ctx, r)
	if err != nil {
		return nil, err
	}
	choice := resp.Choices[0]
	msg := choice.Message
	msg.Role = "assistant"
	// The stop word swallows the closing tag of a text call: put it back.
	if req.TextMode && strings.Count(msg.Content, "<function=") == 1 && !strings.Contains(msg.Content, "</function>") {
		msg.Content = strings.TrimRight(msg.Content, "\n ") + "\n</function>"
	}
	return &agent.ModelReply{
		Message:          msg,
		PromptTokens:     resp.Usage.PromptTokens,
		CompletionTokens: resp.Usage.CompletionTokens,
		TokenIDs:         choice.TokenIDs,
		Logprobs:         choice.TokenLogprobs(),
	}, nil
}

package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
)

// OpenAI plays one job with a model served by an OpenAI-compatible
// endpoint (vLLM, SGLang, OpenAI): native tool calls, or the text
// <function=...> syntax in text mode. Everything it sends — model, sampling,
// seed, token capture — comes from the job. It is safe for concurrent use.
type OpenAI struct {
	client   *llm.Client
	endpoint string
	policy   schema.Policy
	sampling schema.Sampling
}

// NewOpenAI binds a job's policy and sampling to a client of the endpoint
// that serves its model; endpoint names it in trajectories (no secrets).
func NewOpenAI(client *llm.Client, endpoint string, p schema.Policy, s schema.Sampling) (*OpenAI, error) {
	switch {
	case client == nil:
		return nil, errors.New("openai policy: a client is required")
	case p.Model == "":
		return nil, errors.New("openai policy: the job names no model")
	}
	if err := ValidateSampling(s); err != nil {
		return nil, err
	}
	return &OpenAI{client: client, endpoint: endpoint, policy: p, sampling: s}, nil
}

// ValidateSampling rejects parameters no server accepts.
func ValidateSampling(s schema.Sampling) error {
	switch {
	case s.Temperature < 0:
		return fmt.Errorf("sampling: temperature %g is negative", s.Temperature)
	case s.TopP < 0 || s.TopP > 1:
		return fmt.Errorf("sampling: top_p %g is outside [0, 1]", s.TopP)
	case s.TopK < 0:
		return fmt.Errorf("sampling: top_k %d is negative", s.TopK)
	case s.RepetitionPenalty < 0:
		return fmt.Errorf("sampling: repetition penalty %g is negative", s.RepetitionPenalty)
	case s.MaxTokens < 0:
		return fmt.Errorf("sampling: max tokens %d is negative", s.MaxTokens)
	}
	return nil
}

// Endpoint is where the model is served, without credentials.
func (o *OpenAI) Endpoint() string { return o.endpoint }

// Next implements agent.Model.
func (o *OpenAI) Next(ctx context.Context, req agent.ModelRequest) (*agent.ModelReply, error) {
	s := o.sampling
	temp := s.Temperature
	// One seed per turn: reproducible, yet turns and samples differ.
	seed := s.Seed + int64(req.Turn)
	r := llm.Request{Model: o.policy.Model, Messages: req.Messages, Temperature: &temp, MaxTokens: int(s.MaxTokens),
		Seed: &seed, Extra: map[string]any{}}
	if s.TopP > 0 {
		topP := s.TopP
		r.TopP = &topP
	}
	if s.TopK > 0 {
		r.Extra["top_k"] = s.TopK
	}
	if s.RepetitionPenalty > 0 {
		r.Extra["repetition_penalty"] = s.RepetitionPenalty
	}
	if o.policy.Logprobs {
		r.Extra["logprobs"] = true
	}
	if o.policy.ReturnTokenIDs {
		r.Extra["return_token_ids"] = true
	}
	if req.TextMode {
		// The stop word ends the reply at the call's closing tag; the
		// reply is kept as returned (the parser needs no closing tag), so
		// the history holds exactly the text the model generated.
		r.Stop = []string{"</function"}
	} else if len(req.Tools) > 0 {
		tools, err := json.Marshal(req.Tools)
		if err != nil {
			return nil, err
		}
		r.Tools = tools
	}
	resp, err := o.client.Chat(ctx, r)
	if err != nil {
		return nil, err
	}
	choice := resp.Choices[0]
	msg := choice.Message
	msg.Role = "assistant"
	return &agent.ModelReply{
		Message:          msg,
		FinishReason:     choice.FinishReason,
		PromptTokens:     resp.Usage.PromptTokens,
		CompletionTokens: resp.Usage.CompletionTokens,
		PromptTokenIDs:   resp.PromptTokenIDs,
		TokenIDs:         choice.TokenIDs,
		Logprobs:         choice.TokenLogprobs(),
	}, nil
}

// RedactURL drops credentials and the query from an endpoint URL, for
// trajectories, logs and errors.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

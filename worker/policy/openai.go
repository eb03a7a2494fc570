package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
)

// OpenAI plays one job with a model served by an OpenAI-compatible
// endpoint (vLLM, SGLang, OpenAI): native tool calls, or the text
// <function=...> syntax in text mode. Everything it sends — model, sampling,
// seed, token capture — comes from the job. One OpenAI plays one episode:
// it keeps to one replica of the model for every turn (moving only when
// that replica fails) and frees it on Close.
type OpenAI struct {
	replicas *Replicas
	episode  string // sent in the replicas' episode header
	prefer   string // the replica to try first (a branch's parent's)
	policy   schema.Policy
	sampling schema.Sampling

	mu    sync.Mutex
	bound *replica // the episode's replica; nil before the first turn
}

// NewOpenAI binds a job's policy and sampling to the replicas that serve
// its model; episode identifies the episode to a router in front of them.
func NewOpenAI(replicas *Replicas, episode string, p schema.Policy, s schema.Sampling) (*OpenAI, error) {
	switch {
	case replicas == nil || len(replicas.replicas) == 0:
		return nil, errors.New("openai policy: a server is required")
	case p.Model == "":
		return nil, errors.New("openai policy: the job names no model")
	}
	if err := ValidateSampling(s); err != nil {
		return nil, err
	}
	return &OpenAI{replicas: replicas, episode: episode, policy: p, sampling: s}, nil
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

// Endpoint is where the model is served, without credentials: the
// episode's replica once it has one, else the first replica.
func (o *OpenAI) Endpoint() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bound != nil {
		return o.bound.name
	}
	return o.replicas.replicas[0].name
}

// PreferReplica asks for the named replica when the episode picks one (a
// branch resumes where its parent's conversation is cached); a replica
// that is not one of these, or is failing, is ignored.
func (o *OpenAI) PreferReplica(name string) { o.prefer = name }

// Close ends the episode: its replica is free for others.
func (o *OpenAI) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bound != nil {
		o.replicas.release(o.bound)
		o.bound = nil
	}
	return nil
}

// send sends one turn's request to the episode's replica, binding one
// first; a replica that fails after the client's retries is marked and
// the request goes, whole, to another healthy one. With none left the
// error wraps ErrNoReplica.
func (o *OpenAI) send(ctx context.Context, r llm.Request) (*llm.Response, string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	sticky := o.replicas.routing == RouteSticky
	var lastErr error
	restored := map[*replica]bool{}
	for {
		if o.bound == nil {
			rep, err := o.replicas.acquire(o.prefer, o.policy.Model, nil)
			if err != nil {
				if lastErr != nil {
					err = fmt.Errorf("%w; last error: %v", err, lastErr)
				}
				return nil, "", err
			}
			o.bound = rep
		}
		rep := o.bound
		resp, err := rep.client.Chat(ctx, r)
		if !sticky {
			o.replicas.release(rep)
			o.bound = nil
		}
		if err == nil {
			o.replicas.answered(rep)
			return resp, rep.name, nil
		}
		if ctx.Err() != nil {
			return nil, rep.name, err
		}
		if llm.ModelMissing(err) {
			// The replica does not serve the job's model: an adapter it
			// forgot when it restarted, or one it never had. Load it there
			// once and ask again; else leave the replica out for this
			// model. Either way the turn is not the policy's.
			if o.policy.Adapter != "" && !restored[rep] {
				restored[rep] = true
				lerr := o.replicas.restore(ctx, rep, o.policy.Model, o.policy.Adapter)
				if lerr == nil {
					continue // sticky: the same replica again
				}
				err = fmt.Errorf("%w; loading it from %s failed: %v", err, o.policy.Adapter, lerr)
			}
			o.replicas.lack(rep, o.policy.Model)
			if sticky {
				o.replicas.release(rep)
				o.bound = nil
			}
			lastErr = fmt.Errorf("%s: %w", rep.name, err)
			continue
		}
		if !unavailable(err) {
			return nil, rep.name, err
		}
		o.replicas.failed(rep)
		if sticky {
			o.replicas.release(rep)
			o.bound = nil
		}
		lastErr = fmt.Errorf("%s: %w", rep.name, err)
	}
}

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
	if o.replicas.header != "" && o.episode != "" {
		r.Header = http.Header{o.replicas.header: {o.episode}}
	}
	resp, name, err := o.send(ctx, r)
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
		Replica:          name,
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

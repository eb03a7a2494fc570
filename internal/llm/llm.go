// Package llm is a small client for OpenAI-compatible chat-completions
// servers (vLLM, SGLang, OpenAI and others): requests with tools and
// sampling parameters, retries with backoff on 429 and 5xx, timeouts, and
// token usage. It knows nothing about agents; callers build the messages.
package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a2farm/a2farm/schema"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the server's API root, e.g. http://localhost:8000/v1.
	BaseURL string
	// APIKey is sent as a bearer token when set. Take it from the
	// environment; it is never logged.
	APIKey string
	// Timeout bounds one HTTP attempt (default 120 s).
	Timeout time.Duration
	// MaxRetries is the number of retries after a 429, a 5xx or a network
	// error (default 4); other errors are not retried.
	MaxRetries int
	// Backoff is the first retry delay, doubled each retry with jitter
	// (default 500 ms); a Retry-After header wins.
	Backoff time.Duration
	// HTTPClient overrides the transport (tests).
	HTTPClient *http.Client
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.Timeout == 0 {
		out.Timeout = 120 * time.Second
	}
	if out.MaxRetries == 0 {
		out.MaxRetries = 4
	}
	if out.Backoff == 0 {
		out.Backoff = 500 * time.Millisecond
	}
	if out.HTTPClient == nil {
		// A worker keeps dozens of requests in flight to one server: keep
		// that many connections open between turns (Go's default keeps 2
		// per host and dials a new one for nearly every call).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 1024
		out.HTTPClient = &http.Client{Transport: t}
	}
	return out
}

// Client calls one server.
type Client struct {
	cfg Config
	url string
}

// New validates cfg and returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("llm: a base URL is required")
	}
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("llm: base URL %q must start with http:// or https://", cfg.BaseURL)
	}
	if cfg.MaxRetries < 0 || cfg.Timeout < 0 || cfg.Backoff < 0 {
		return nil, errors.New("llm: retries, timeout and backoff must not be negative")
	}
	c := cfg.withDefaults()
	return &Client{cfg: c, url: strings.TrimRight(c.BaseURL, "/") + "/chat/completions"}, nil
}

// Message, ToolCall and FunctionCall are the wire shapes of the chat
// protocol; they are the schema's types, so that what a trajectory records
// is what was sent, field for field.
type (
	Message      = schema.Message
	ToolCall     = schema.ToolCall
	FunctionCall = schema.FunctionCall
)

// Request is a chat-completions request. Extra holds server-specific
// fields sent at the top level (vLLM: top_k, repetition_penalty, seed...).
type Request struct {
	Model       string          `json:"model"`
	Messages    []Message       `json:"messages"`
	Tools       json.RawMessage `json:"tools,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
	TopP        *float64        `json:"top_p,omitempty"`
	MaxTokens   int             `json:"max_tokens,omitempty"`
	Stop        []string        `json:"stop,omitempty"`
	Seed        *int64          `json:"seed,omitempty"`
	Extra       map[string]any  `json:"-"`
	// Header holds extra HTTP headers of the request (an episode id for
	// a router with consistent hashing, say); not part of the body.
	Header http.Header `json:"-"`
}

// MarshalJSON writes the request with Tools (which must hold valid JSON,
// as it is sent as is) and the Extra fields that do not collide with a
// standard one spliced into the object: a request carries the whole
// conversation, and a decode/re-encode round trip through a map, or a
// second validation of the tool specs on every turn, would cost more CPU
// than everything else the client does.
func (r Request) MarshalJSON() ([]byte, error) {
	type plain Request
	p := plain(r)
	p.Tools = nil
	base, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(r.Tools) == 0 && len(r.Extra) == 0 {
		return base, nil
	}
	out := base[:len(base)-1] // reopen the object: drop its closing brace
	if len(r.Tools) > 0 {
		out = append(append(out, `,"tools":`...), r.Tools...)
	}
	keys := make([]string, 0, len(r.Extra))
	for k := range r.Extra {
		if !r.hasField(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // stable bodies, for logs and tests
	for _, k := range keys {
		name, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		value, err := json.Marshal(r.Extra[k])
		if err != nil {
			return nil, fmt.Errorf("llm: extra field %s: %w", k, err)
		}
		out = append(append(append(append(out, ','), name...), ':'), value...)
	}
	return append(out, '}'), nil
}

// hasField reports whether the request's standard fields write key, which
// then wins over an Extra field of the same name.
func (r Request) hasField(key string) bool {
	switch key {
	case "model", "messages":
		return true
	case "tools":
		return len(r.Tools) > 0
	case "temperature":
		return r.Temperature != nil
	case "top_p":
		return r.TopP != nil
	case "max_tokens":
		return r.MaxTokens != 0
	case "stop":
		return len(r.Stop) > 0
	case "seed":
		return r.Seed != nil
	}
	return false
}

// Usage is the server's token accounting.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Choice is one completion.
type Choice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason string  `json:"finish_reason"`
	// Logprobs is kept raw: servers differ in what they return.
	Logprobs json.RawMessage `json:"logprobs,omitempty"`
	// TokenIDs are the completion's token ids, when the server returns
	// them (vLLM and SGLang with return_token_ids).
	TokenIDs []int32 `json:"token_ids,omitempty"`
}

// TokenLogprobs extracts per-token log-probabilities from an OpenAI-style
// logprobs object ({"content": [{"token", "logprob"}, ...]}); nil when
// absent or in another shape.
func (c Choice) TokenLogprobs() []float32 {
	if len(c.Logprobs) == 0 {
		return nil
	}
	var lp struct {
		Content []struct {
			Logprob float64 `json:"logprob"`
		} `json:"content"`
	}
	if json.Unmarshal(c.Logprobs, &lp) != nil || len(lp.Content) == 0 {
		return nil
	}
	out := make([]float32, len(lp.Content))
	for i, t := range lp.Content {
		out[i] = float32(t.Logprob)
	}
	return out
}

// Response is a chat-completions response.
type Response struct {
	ID      string   `json:"id"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`
	// PromptTokenIDs are the request's token ids as the server's chat
	// template rendered them, when it returns them (return_token_ids).
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitempty"`
}

// StatusError is a non-2xx answer from the server.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("llm: server answered %d: %s", e.Code, e.Body)
}

// Retryable reports whether the status is worth retrying.
func (e *StatusError) Retryable() bool { return e.Code == http.StatusTooManyRequests || e.Code >= 500 }

// ContextOverflow reports whether the server rejected the request for
// exceeding the model's context (vLLM and OpenAI answer 400 with a message
// about the maximum context length).
func (e *StatusError) ContextOverflow() bool {
	b := strings.ToLower(e.Body)
	return e.Code == http.StatusBadRequest && (strings.Contains(b, "context length") || strings.Contains(b, "context_length") ||
		strings.Contains(b, "maximum context") || strings.Contains(b, "too many tokens"))
}

// Chat sends the request, retrying transient failures.
func (c *Client) Chat(ctx context.Context, req Request) (*Response, error) {
	// MarshalJSON directly: json.Marshal would validate and compact the
	// whole body a second time.
	body, err := req.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("llm: encode request: %w", err)
	}
	delay := c.cfg.Backoff
	for attempt := 0; ; attempt++ {
		resp, retryAfter, err := c.once(ctx, body, req.Header)
		if err == nil {
			return resp, nil
		}
		var se *StatusError
		retryable := errors.As(err, &se) && se.Retryable() || IsNetworkError(err)
		if !retryable || attempt >= c.cfg.MaxRetries || ctx.Err() != nil {
			return nil, err
		}
		wait := delay + time.Duration(rand.Int64N(int64(delay)/2+1))
		if retryAfter > 0 {
			wait = retryAfter
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		delay *= 2
	}
}

func (c *Client) once(ctx context.Context, body []byte, header http.Header) (*Response, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	for k, vs := range header {
		hreq.Header[k] = vs
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	hresp, err := c.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return nil, 0, &networkError{err}
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, 64<<20))
	if err != nil {
		return nil, 0, &networkError{err}
	}
	if hresp.StatusCode/100 != 2 {
		var retryAfter time.Duration
		if s, err := strconv.Atoi(hresp.Header.Get("Retry-After")); err == nil && s >= 0 {
			retryAfter = time.Duration(s) * time.Second
		}
		return nil, retryAfter, &StatusError{Code: hresp.StatusCode, Body: truncate(string(data), 500)}
	}
	var resp Response
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, 0, fmt.Errorf("llm: decode response: %w (body %q)", err, truncate(string(data), 200))
	}
	if len(resp.Choices) == 0 {
		return nil, 0, fmt.Errorf("llm: response has no choices")
	}
	return &resp, 0, nil
}

type networkError struct{ err error }

func (e *networkError) Error() string { return "llm: " + e.err.Error() }
func (e *networkError) Unwrap() error { return e.err }

// IsNetworkError reports whether err is a failure to reach the server or
// read its answer (as opposed to an answer the server gave).
func IsNetworkError(err error) bool {
	var ne *networkError
	return errors.As(err, &ne)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

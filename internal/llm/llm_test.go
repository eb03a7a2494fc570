package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// server answers chat completions with the given handlers in turn (the
// last one repeats) and records the request bodies.
func server(t *testing.T, handlers ...http.HandlerFunc) (*httptest.Server, *[]map[string]any, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		data, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(data, &m)
		m["_auth"] = r.Header.Get("Authorization")
		bodies = append(bodies, m)
		i := int(calls.Add(1)) - 1
		handlers[min(i, len(handlers)-1)](w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies, &calls
}

func ok(content string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"id": "c1", "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": content}}},
			"usage": map[string]any{"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
		})
	}
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func newClient(t *testing.T, url string, cfg Config) *Client {
	t.Helper()
	cfg.BaseURL = url + "/v1"
	if cfg.Backoff == 0 {
		cfg.Backoff = time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChatRetriesTransientFailures(t *testing.T) {
	srv, bodies, calls := server(t, status(429, "slow down"), status(503, "busy"), ok("hello"))
	temp, topP := 1.0, 0.8
	c := newClient(t, srv.URL, Config{APIKey: "sk-test"})
	resp, err := c.Chat(context.Background(), Request{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}},
		Temperature: &temp, TopP: &topP, Extra: map[string]any{"top_k": 20, "repetition_penalty": 1.05}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "hello" || resp.Usage.TotalTokens != 14 || calls.Load() != 3 {
		t.Errorf("resp = %+v after %d calls", resp, calls.Load())
	}
	b := (*bodies)[0]
	if b["top_k"] != float64(20) || b["repetition_penalty"] != 1.05 || b["top_p"] != 0.8 || b["_auth"] != "Bearer sk-test" {
		t.Errorf("request body = %v", b)
	}
}

func TestChatGivesUpAndReportsStatus(t *testing.T) {
	srv, _, calls := server(t, status(500, "boom"))
	c := newClient(t, srv.URL, Config{MaxRetries: 2})
	_, err := c.Chat(context.Background(), Request{Model: "m"})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 500 || calls.Load() != 3 {
		t.Errorf("err = %v after %d calls; want a 500 after 3 attempts", err, calls.Load())
	}
}

func TestChatDoesNotRetryBadRequests(t *testing.T) {
	srv, _, calls := server(t, status(400, `{"error": "This model's maximum context length is 32768 tokens"}`))
	c := newClient(t, srv.URL, Config{})
	_, err := c.Chat(context.Background(), Request{Model: "m"})
	var se *StatusError
	if !errors.As(err, &se) || !se.ContextOverflow() || calls.Load() != 1 {
		t.Errorf("err = %v after %d calls; want one context-overflow 400", err, calls.Load())
	}
}

func TestChatTimesOutEachAttempt(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}
	srv, _, calls := server(t, slow, ok("late but fine"))
	c := newClient(t, srv.URL, Config{Timeout: 50 * time.Millisecond})
	resp, err := c.Chat(context.Background(), Request{Model: "m"})
	if err != nil || resp.Choices[0].Message.Content != "late but fine" || calls.Load() != 2 {
		t.Errorf("resp %v err %v calls %d; want success on the retry after a timeout", resp, err, calls.Load())
	}
}

func TestChatRejectsEmptyAndMalformedAnswers(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"no choices": func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"choices": []}`) },
		"not json":   func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `<html>`) },
	} {
		srv, _, _ := server(t, h)
		if _, err := newClient(t, srv.URL, Config{}).Chat(context.Background(), Request{Model: "m"}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{{}, {BaseURL: "localhost:8000"}, {BaseURL: "http://x", MaxRetries: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
	if _, err := New(Config{BaseURL: "https://api.example/v1"}); err != nil {
		t.Error(err)
	}
}

func TestRequestMarshalJSON(t *testing.T) {
	seed, temp := int64(7), 0.5
	tools := json.RawMessage(`[{"type":"function","function":{"name":"f"}}]`)
	msgs := []Message{{Role: "user", Content: "a <b> & \"c\""}}
	for _, tc := range []struct {
		name string
		req  Request
		want string // the body, decoded and re-encoded with sorted keys
	}{
		{"plain", Request{Model: "m", Messages: msgs},
			`{"messages":[{"content":"a <b> & \"c\"","role":"user"}],"model":"m"}`},
		{"tools", Request{Model: "m", Tools: tools},
			`{"messages":null,"model":"m","tools":[{"function":{"name":"f"},"type":"function"}]}`},
		{"extras beside standard fields", Request{Model: "m", Temperature: &temp, Seed: &seed,
			Extra: map[string]any{"top_k": 20, "seed": 99, "temperature": 2, "a\"b": true}},
			`{"a\"b":true,"messages":null,"model":"m","seed":7,"temperature":0.5,"top_k":20}`},
		{"an extra fills an unset standard field", Request{Model: "m", Extra: map[string]any{"seed": 99, "tools": []int{1}}},
			`{"messages":null,"model":"m","seed":99,"tools":[1]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := tc.req.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var decoded map[string]any
			if err := json.Unmarshal(body, &decoded); err != nil {
				t.Fatalf("body %s is not JSON: %v", body, err)
			}
			got, _ := json.Marshal(decoded)
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) {
				t.Errorf("body = %s\nwant  %s", got, wantJSON)
			}
		})
	}
	if _, err := (Request{Model: "m", Extra: map[string]any{"bad": make(chan int)}}).MarshalJSON(); err == nil ||
		!strings.Contains(err.Error(), "extra field bad") {
		t.Errorf("an unencodable extra gave %v", err)
	}
}

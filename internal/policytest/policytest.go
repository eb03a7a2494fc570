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
	"testing"
	"time"
)

// Scripted answers every chat completion after delay with the same short
// episode on the built-in sample: two code searches for "Warehouse", then
// finish naming inventory/models.py. The turn is read from the number of
// assistant messages in the request. The server closes with the test.
func Scripted(tb testing.TB, delay time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
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
		if turn >= 2 {
			call = `{"name":"finish","arguments":"{\"answer\":\"` + "```\\\\ninventory/models.py\\\\n```" + `\"}"}`
		}
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"","tool_calls":[{"id":"c%d","type":"function","function":%s}]}}]}`, turn, call)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

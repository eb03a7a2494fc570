package summary

import (
	"context"
	"encoding/json"
	"github.com/a2farm/a2farm/worker/codegraph"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2farm/a2farm/internal/llm"
)

// chatServer is the stand-in for a policy server: it answers every chat
// completion with a summary naming the file it was asked about, or fails
// when broken is set.
func chatServer(t *testing.T, broken *atomic.Bool, calls *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if broken.Load() {
			http.Error(w, "model crashed", http.StatusInternalServerError)
			return
		}
		var req llm.Request
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		user := req.Messages[len(req.Messages)-1].Content
		file := strings.TrimPrefix(strings.SplitN(user, "\n", 2)[0], "File: ")
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{
			"message": map[string]any{"role": "assistant", "content": " Summary of " + file + ". "}}}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestGenerateSummariesResumes(t *testing.T) {
	src := &codegraph.Snapshot{Files: []codegraph.SourceFile{
		{Path: "pkg/a.py", Blob: "b1", Content: []byte("def a():\n    pass\n")},
		{Path: "pkg/b.py", Blob: "b2", Content: []byte("class B:\n    pass\n")},
		{Path: "tests/test_a.py", Blob: "b3", Content: []byte("def test_a(): pass\n")},
	}}
	var broken atomic.Bool
	var calls atomic.Int32
	srv := chatServer(t, &broken, &calls)
	client, err := llm.New(llm.Config{BaseURL: srv.URL, MaxRetries: 1, Backoff: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := &LLMSummarizer{Client: client, Model: "m"}
	out := filepath.Join(t.TempDir(), "summaries.json")

	made, err := GenerateSummaries(context.Background(), src, s, SummarizeConfig{Out: out, Concurrency: 2})
	if err != nil || made != 2 || calls.Load() != 2 {
		t.Fatalf("made %d, calls %d, err %v; want 2 summaries (test files skipped)", made, calls.Load(), err)
	}
	table, err := LoadSummaryFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if table["pkg/a.py"] != "Summary of pkg/a.py." || len(table) != 2 {
		t.Errorf("table = %v", table)
	}

	// A rerun (say after a crash, or for a commit where only b.py changed)
	// asks the server only for new content.
	broken.Store(true)
	src.Files[1].Blob = "b2-changed"
	if _, err := GenerateSummaries(context.Background(), src, s, SummarizeConfig{Out: out}); err == nil {
		t.Fatal("a failing server went unnoticed")
	}
	broken.Store(false)
	calls.Store(0)
	made, err = GenerateSummaries(context.Background(), src, s, SummarizeConfig{Out: out})
	if err != nil || made != 1 || calls.Load() != 1 {
		t.Errorf("resume: made %d, calls %d, err %v; want only the changed file", made, calls.Load(), err)
	}
	if _, err := os.Stat(out + ".journal.jsonl"); err != nil {
		t.Errorf("journal missing: %v", err)
	}
}

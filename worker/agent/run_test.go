package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/repoindex"
	"github.com/a2farm/a2farm/worker/tools"
)

var sampleIndex = sync.OnceValues(func() (*repoindex.Index, error) {
	l, err := sample.Write(filepath.Join(testRoot, "sample-index"))
	if err != nil {
		return nil, err
	}
	repos := gitrepo.NewSet(l.ReposDir)
	return repoindex.Build(context.Background(), repos, sample.Repo, "main", repoindex.BuildOptions{Languages: lang.NewSet(python.Language{})})
})

// scriptedModel stands in for the policy server inside one process: it
// answers each turn with next(turn), and may block like a slow server.
type scriptedModel struct {
	next func(ctx context.Context, turn int) (*ModelReply, error)
}

func (m scriptedModel) Next(ctx context.Context, req ModelRequest) (*ModelReply, error) {
	return m.next(ctx, req.Turn)
}

func searchReply(turn int) *ModelReply {
	return &ModelReply{Message: llm.Message{Role: "assistant", ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("c%d", turn), Type: "function",
		Function: llm.FunctionCall{Name: tools.SearchCodeSnippets, Arguments: `{"search_terms":["Warehouse"]}`}}}}}
}

func episode(t *testing.T, model Model) Episode {
	t.Helper()
	idx, err := sampleIndex()
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.New(idx, tools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	job := schema.Job{JobID: "r/0/i/0", RunID: "r", InstanceID: "i", Repo: sample.Repo, ProblemStatement: "Warehouse.remove_item is wrong",
		Policy: schema.Policy{Kind: schema.PolicyOpenAI, Model: "m"}, Attempt: 1}
	return Episode{Job: job, Tools: set, Graph: idx.Graph, Model: model}
}

// TestRunEndings drives Run with an in-process model through each way an
// episode ends without an answer of its own: the wall time runs out while
// the model is thinking, the model fails, the tool budget is spent, and
// the caller cancels.
func TestRunEndings(t *testing.T) {
	hang := func(ctx context.Context, turn int) (*ModelReply, error) {
		if turn == 0 {
			return searchReply(turn), nil
		}
		<-ctx.Done() // a server that never answers the second call
		return nil, ctx.Err()
	}
	tests := []struct {
		name    string
		cfg     Config
		next    func(ctx context.Context, turn int) (*ModelReply, error)
		cancel  bool // the caller cancels mid-episode: Run returns the error
		status  schema.Status
		errText string
		turns   int
	}{
		{name: "wall time", cfg: Config{WallTime: 300 * time.Millisecond}, next: hang,
			status: schema.StatusTimeout, errText: "wall time exceeded", turns: 1},
		{name: "policy error", next: func(_ context.Context, turn int) (*ModelReply, error) {
			if turn == 2 {
				return nil, errors.New("server said 500")
			}
			return searchReply(turn), nil
		}, status: schema.StatusPolicyError, errText: "server said 500", turns: 2},
		{name: "tool budget", cfg: Config{MaxToolCalls: 2}, next: func(_ context.Context, turn int) (*ModelReply, error) {
			return searchReply(turn), nil
		}, status: schema.StatusTruncated, turns: 3},
		{name: "cancelled", next: hang, cancel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			start := time.Now()
			tr, err := Run(ctx, tt.cfg, episode(t, scriptedModel{tt.next}))
			if tt.cancel {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("a cancelled episode returned %v, want context.Canceled", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.Status != tt.status || !strings.Contains(tr.Error, tt.errText) || len(tr.Turns) != tt.turns {
				t.Errorf("status %s, error %q, %d turns; want %s, %q, %d", tr.Status, tr.Error, len(tr.Turns), tt.status, tt.errText, tt.turns)
			}
			if tt.cfg.WallTime > 0 && time.Since(start) > tt.cfg.WallTime+5*time.Second {
				t.Errorf("the episode outlived its wall time by %s", time.Since(start)-tt.cfg.WallTime)
			}
			if tr.JobID != "r/0/i/0" || tr.Attempt != 1 || tr.Policy.Model != "m" {
				t.Errorf("the trajectory lost its job: %+v", tr)
			}
		})
	}
}

package summary

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/a2farm/a2farm/worker/codegraph"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/llm"
)

// Summarizer writes a short summary of one source file.
type Summarizer interface {
	Summarize(ctx context.Context, path, code string) (string, error)
}

// SummarizeConfig configures GenerateSummaries.
type SummarizeConfig struct {
	// Out is the {file_path: summary} JSON to write. Its journal,
	// Out + ".journal.jsonl", records every summary as it arrives: a
	// rerun resumes from it, and files whose content (git blob) is
	// unchanged are never summarized twice.
	Out string
	// Concurrency bounds requests in flight (default 4).
	Concurrency int
	// Progress, when set, is told about every finished file.
	Progress func(done, total int)
}

type journalEntry struct {
	Path    string `json:"path"`
	Blob    string `json:"blob"`
	Summary string `json:"summary"`
}

// GenerateSummaries summarizes every non-test source file of src with s
// and writes cfg.Out. It returns how many files it summarized (the rest
// came from the journal).
func GenerateSummaries(ctx context.Context, src *codegraph.Snapshot, s Summarizer, cfg SummarizeConfig) (int, error) {
	if cfg.Out == "" {
		return 0, errors.New("summaries: an output file is required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	journalPath := cfg.Out + ".journal.jsonl"
	byBlob, err := readJournal(journalPath)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err != nil {
		return 0, err
	}
	journal, err := os.OpenFile(journalPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer journal.Close()

	var files []codegraph.SourceFile
	for _, f := range src.Files {
		if !codegraph.IsTestID(f.Path) {
			files = append(files, f)
		}
	}
	out := make(map[string]string, len(files))
	var mu sync.Mutex
	done, made := 0, 0
	finish := func(f codegraph.SourceFile, summary string, fresh bool) error {
		mu.Lock()
		defer mu.Unlock()
		out[f.Path] = summary
		done++
		if fresh {
			made++
			line, _ := json.Marshal(journalEntry{f.Path, f.Blob, summary})
			if _, err := journal.Write(append(line, '\n')); err != nil {
				return fmt.Errorf("summaries journal: %w", err)
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(done, len(files))
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Concurrency)
	for _, f := range files {
		if summary, ok := byBlob[f.Blob]; ok {
			if err := finish(f, summary, false); err != nil {
				return made, err
			}
			continue
		}
		g.Go(func() error {
			summary, err := s.Summarize(gctx, f.Path, string(f.Content))
			if err != nil {
				return fmt.Errorf("summarize %s: %w", f.Path, err)
			}
			return finish(f, strings.TrimSpace(summary), true)
		})
	}
	if err := g.Wait(); err != nil {
		return made, err
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return made, err
	}
	return made, atomicfile.Write(cfg.Out, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

func readJournal(path string) (map[string]string, error) {
	byBlob := map[string]string{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return byBlob, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var e journalEntry
		// A torn last line (a crash mid-write) is skipped, not fatal.
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Blob != "" && e.Summary != "" {
			byBlob[e.Blob] = e.Summary
		}
	}
	return byBlob, sc.Err()
}

// LLMSummarizer asks an OpenAI-compatible server for 2-4 sentence file
// summaries.
type LLMSummarizer struct {
	Client *llm.Client
	Model  string
	// MaxChars bounds the code sent per file (default 12,000).
	MaxChars int
}

// Summarize implements Summarizer.
func (l *LLMSummarizer) Summarize(ctx context.Context, path, code string) (string, error) {
	limit := l.MaxChars
	if limit <= 0 {
		limit = 12000
	}
	if len(code) > limit {
		code = code[:limit] + "\n# ... (file continues)"
	}
	temp := 0.0
	resp, err := l.Client.Chat(ctx, llm.Request{
		Model:       l.Model,
		Temperature: &temp,
		MaxTokens:   256,
		Messages: []llm.Message{
			{Role: "system", Content: "You describe source files for engineers navigating an unfamiliar repository. Answer with two to four plain sentences: what the file is responsible for and its main classes or functions. No lists, no code."},
			{Role: "user", Content: "File: " + path + "\n\n```python\n" + code + "\n```"},
		},
	})
	if err != nil {
		return "", err
	}
	text := strings.TrimSpace(resp.Choices[0].Message.Content)
	if text == "" {
		return "", errors.New("empty summary")
	}
	return text, nil
}

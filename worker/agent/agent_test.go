package agent

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"

	"github.com/a2farm/a2farm/internal/llm"
)

func TestProblemBlockAndHints(t *testing.T) {
	block := problemBlock("  Title line  \r\nbody one\n\nbody two\n")
	want := "--- BEGIN PROBLEM STATEMENT ---\nTitle: Title line\n\nbody one\n\nbody two\n--- END PROBLEM STATEMENT ---"
	if block != want {
		t.Errorf("problemBlock = %q", block)
	}
	if got := ProblemStatement(userPrompt("pkg", "T\nB", 0)); got != "T\n\nB" {
		t.Errorf("ProblemStatement = %q", got)
	}
	for s := range int64(10) {
		p := userPrompt("pkg", "x", s)
		hint := strategyHints[s%5]
		if hint != "" && !strings.HasSuffix(p, hint) || hint == "" && strings.Contains(p, "Hint:") {
			t.Errorf("sample %d: wrong hint in %q", s, p[len(p)-120:])
		}
	}
}

func TestParseTextCall(t *testing.T) {
	types := func(tool, param string) string {
		return map[string]string{"t.n": "integer", "t.list": "array"}[tool+"."+param]
	}
	call, ok := parseTextCall("think...\n<function=t>\n<parameter=n> 7 </parameter>\n<parameter=list>['a', \"b\"]</parameter>\n<parameter=s>multi\nline</parameter>\n</function>", types)
	want := map[string]any{"n": 7, "list": []any{"a", "b"}, "s": "multi\nline"}
	if !ok || call.name != "t" || !reflect.DeepEqual(call.args, want) {
		t.Errorf("call = %+v, ok %v", call, ok)
	}
	// an unterminated last parameter (the stop word cut the reply) still parses
	call, ok = parseTextCall("<function=t>\n<parameter=n>x", types)
	if !ok || call.args["n"] != "x" {
		t.Errorf("unterminated: %+v", call)
	}
	if _, ok := parseTextCall("no call here", types); ok {
		t.Error("found a call in plain text")
	}
}

func TestTrimKeepsTaskAndRecentTurns(t *testing.T) {
	msgs := []llm.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "task"}}
	for i := range 20 {
		msgs = append(msgs, llm.Message{Role: "assistant", Content: fmt.Sprint("a", i)},
			llm.Message{Role: "tool", Content: strings.Repeat("x", 4000)})
	}
	if got := trimLevel(msgs, 0, 1_000_000, 0); len(got) != len(msgs) {
		t.Errorf("trimmed %d messages under the limit", len(msgs)-len(got))
	}
	got := trimLevel(msgs, 0, 10_000, 0)
	if got[0].Content != "s" || got[1].Content != "task" || !strings.Contains(got[2].Content, "earlier exploration messages were removed") {
		t.Fatalf("head = %+v", got[:3])
	}
	if got[3].Role == "tool" || len(got) > 3+6 {
		t.Errorf("tail starts with %s and has %d messages", got[3].Role, len(got)-3)
	}
	if deeper := trimLevel(msgs, 0, 1_000_000, 2); len(deeper) != 3+2 {
		t.Errorf("after two overflows %d messages are sent, want 5", len(deeper))
	}
	if n := estimateTokens(msgs[:2], 5000); n != 5000 {
		t.Errorf("the server's count must win over a smaller estimate, got %d", n)
	}
}

func TestPlainAnswerAndFallback(t *testing.T) {
	syntax := newPathSyntax(lang.NewSet(python.Language{}))
	if a, ok := syntax.plainAnswer("done <finish>x</finish> here"); !ok || a != "done  here" {
		t.Errorf("finish tag: %q %v", a, ok)
	}
	if _, ok := syntax.plainAnswer("```\npkg/a.py\n```"); !ok {
		t.Error("fenced path not taken as an answer")
	}
	if _, ok := syntax.plainAnswer("thinking about pkg/a.py"); ok {
		t.Error("a bare mention is not an answer")
	}
	msgs := []llm.Message{
		{Role: "assistant", ToolCalls: []llm.ToolCall{{Function: llm.FunctionCall{Name: "get_entity_contents", Arguments: `{"entity_names":["pkg/a.py:f"]}`}}}},
		{Role: "assistant", ToolCalls: []llm.ToolCall{{Function: llm.FunctionCall{Name: "search_code_snippets", Arguments: `{"search_terms":["pkg/b.py"]}`}}}},
	}
	if got := syntax.fallbackAnswer("", msgs); got != "```\npkg/b.py\npkg/a.py\n```" {
		t.Errorf("fallback = %q", got)
	}
}

// Package tools implements the agent's read-only repository tools with the
// reference names, JSON schemas and observation formats, so that models
// trained on the reference run unchanged: explore_tree_structure,
// search_code_snippets, get_entity_contents, search_summary, view_summary,
// search_commit and finish.
//
// A tool never fails: bad arguments produce an observation that says what
// was wrong. Every result also lists the ids it surfaced (files, modules,
// entities), which the learner's discovery reward uses.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/history"
	"github.com/a2farm/a2farm/worker/repoindex"
)

// Caps on observation size, in characters (Unicode code points).
const (
	ToolCap   = 8000  // per-tool cut, where the reference applies one
	GlobalCap = 12000 // every observation
	// MaxListArgs bounds array arguments (entity names, terms, lines).
	MaxListArgs = 64
)

// Result is what a tool call returns.
type Result struct {
	Observation string
	// Surfaced are the ids the observation shows, for discovery rewards.
	Surfaced schema.Locations
	// Finish is set by the finish tool: the episode ends with Answer.
	Finish bool
	Answer string
}

// Tool is one callable tool.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters json.RawMessage
	call       func(ctx context.Context, s *Set, args json.RawMessage) (Result, error)
}

// Spec is a tool in the OpenAI tools format, its keys in the order the
// format documents them — the order the request carries them in, and the
// order the learner's shards keep and the trainer renders them in.
func (t *Tool) Spec() schema.ToolSpec {
	return schema.ToolSpec{Type: "function",
		Function: schema.ToolFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
}

// Set is the tool set of one episode: a snapshot's indexes seen from one
// issue.
type Set struct {
	idx   *repoindex.Index
	tools map[string]*Tool
	order []string
	// commits is the history with commits that mention the issue's own
	// numbers removed (they would leak the fix).
	commits []history.Commit
}

// Options configure a tool set.
type Options struct {
	// Enabled selects tools by name; nil enables all.
	Enabled []string
	// ProblemStatement is the issue text; commits referencing any "#N" it
	// mentions are hidden from search_commit.
	ProblemStatement string
}

// Names of the tools, in the reference's tool-list order.
const (
	Finish               = "finish"
	SearchCodeSnippets   = "search_code_snippets"
	GetEntityContents    = "get_entity_contents"
	ExploreTreeStructure = "explore_tree_structure"
	SearchCommit         = "search_commit"
	ViewSummary          = "view_summary"
	SearchSummary        = "search_summary"
)

// AllNames lists every tool in the reference order.
func AllNames() []string {
	return []string{Finish, SearchCodeSnippets, GetEntityContents, ExploreTreeStructure, SearchCommit, ViewSummary, SearchSummary}
}

// New returns the tools over idx for one issue.
func New(idx *repoindex.Index, opts Options) (*Set, error) {
	all := map[string]*Tool{
		Finish:               finishTool(),
		SearchCodeSnippets:   searchTool(idx.Graph.Languages()),
		GetEntityContents:    entityTool(),
		ExploreTreeStructure: treeTool(),
		SearchCommit:         commitTool(),
		ViewSummary:          viewSummaryTool(),
		SearchSummary:        searchSummaryTool(),
	}
	enabled := opts.Enabled
	if enabled == nil {
		enabled = AllNames()
	}
	s := &Set{idx: idx, tools: map[string]*Tool{}}
	if idx.Commits != nil {
		leaked := map[string]bool{}
		for _, ref := range history.IssueRefs(opts.ProblemStatement) {
			leaked[ref] = true
		}
		for _, c := range idx.Commits.Commits {
			if !slices.ContainsFunc(c.Issues, func(ref string) bool { return leaked[ref] }) {
				s.commits = append(s.commits, c)
			}
		}
	}
	for _, name := range enabled {
		t, ok := all[name]
		if !ok {
			if slices.Contains(AllNames(), name) {
				continue // not available on this index yet
			}
			return nil, fmt.Errorf("unknown tool %q (known: %s)", name, strings.Join(AllNames(), ", "))
		}
		s.tools[name] = t
		s.order = append(s.order, name)
	}
	return s, nil
}

// Tools returns the enabled tools in order.
func (s *Set) Tools() []*Tool {
	out := make([]*Tool, len(s.order))
	for i, n := range s.order {
		out[i] = s.tools[n]
	}
	return out
}

// Call runs a tool by name with JSON arguments. It never returns an error
// for bad input: the observation explains it.
func (s *Set) Call(ctx context.Context, name string, args json.RawMessage) Result {
	t, ok := s.tools[name]
	if !ok {
		return Result{Observation: fmt.Sprintf("Unknown tool `%s`. Available tools: %s.", name, strings.Join(s.order, ", "))}
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if err := checkArgSizes(args); err != nil {
		return Result{Observation: fmt.Sprintf("Invalid arguments for `%s`: %s", name, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	res, err := s.safeCall(ctx, t, args)
	if err != nil && ctx.Err() != nil {
		return Result{Observation: fmt.Sprintf("Tool `%s` took longer than %s and was stopped: ask for less at once.", name, CallTimeout)}
	}
	if err != nil {
		var ae *argError
		if errors.As(err, &ae) {
			return Result{Observation: fmt.Sprintf("Invalid arguments for `%s`: %s", name, ae.msg)}
		}
		return Result{Observation: fmt.Sprintf("Tool `%s` failed: %v", name, err)}
	}
	res.Observation = Cut(res.Observation, GlobalCap, "\n\n... (truncated)")
	res.Surfaced = visible(res.Surfaced, res.Observation)
	return res
}

// Bounds on one tool call: arguments are what a model writes by hand, and
// an oversized one (a pasted file as a search term) costs minutes of CPU
// for no answer.
const (
	MaxArgBytes   = 16 << 10
	MaxArgString  = 2000
	CallTimeout   = 30 * time.Second
	maxArgEntries = 200
)

// checkArgSizes refuses arguments larger than a model needs.
func checkArgSizes(args json.RawMessage) error {
	if len(args) > MaxArgBytes {
		return fmt.Errorf("the arguments take %d bytes; at most %d are accepted", len(args), MaxArgBytes)
	}
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil // the tool explains malformed JSON itself
	}
	entries := 0
	var walk func(any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case string:
			if n := len([]rune(x)); n > MaxArgString {
				return fmt.Errorf("a value of %d characters; at most %d are accepted: search for a shorter, distinctive part", n, MaxArgString)
			}
		case []any:
			entries += len(x)
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case map[string]any:
			entries += len(x)
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		if entries > maxArgEntries {
			return fmt.Errorf("more than %d values; ask for fewer at once", maxArgEntries)
		}
		return nil
	}
	return walk(v)
}

// safeCall runs a tool, turning a panic (a bug) into an error so that one
// bad call cannot take a worker's other episodes down with it.
func (s *Set) safeCall(ctx context.Context, t *Tool, args json.RawMessage) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = Result{}, fmt.Errorf("internal error: %v", p)
		}
	}()
	return t.call(ctx, s, args)
}

// argError is a problem with the model's arguments.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func badArgs(format string, a ...any) error { return &argError{fmt.Sprintf(format, a...)} }

// decode unmarshals args strictly into v.
func decode(args json.RawMessage, v any) error {
	if !json.Valid(args) || bytes.TrimSpace(args)[0] != '{' {
		return badArgs("the arguments must be a JSON object, got %s.", Cut(string(args), 200, "..."))
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return badArgs("`%s` must be %s, got %s.", ute.Field, jsonKind(ute.Type.String()), ute.Value)
		}
		return badArgs("%s.", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonKind(goType[2:]), "an "), "a ") + "s"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "*int"):
		return "an integer"
	}
	return goType
}

// Cut shortens s to limit characters, adding suffix (with %d replaced by
// the original length when present).
func Cut(s string, limit int, suffix string) string {
	n := utf8.RuneCountInString(s)
	if n <= limit {
		return s
	}
	i := 0
	for pos := range s {
		if i == limit {
			s = s[:pos]
			break
		}
		i++
	}
	if strings.Contains(suffix, "%d") {
		suffix = fmt.Sprintf(suffix, n)
	}
	return s + suffix
}

const toolCutSuffix = "\n... (truncated, %d chars total)"

// surfacer collects the ids an observation shows.
type surfacer struct {
	loc  schema.Locations
	seen map[string]bool
}

// add records a graph node: a file gives its path; a class or function its
// file, its module and itself.
func (sf *surfacer) add(g *codegraph.Graph, n codegraph.NodeID) {
	node := g.Node(n)
	switch node.Type {
	case codegraph.File:
		sf.push(&sf.loc.Files, node.ID)
	case codegraph.Class, codegraph.Function:
		sf.push(&sf.loc.Files, schema.FileOf(node.ID))
		sf.push(&sf.loc.Modules, schema.ModuleOf(node.ID))
		sf.push(&sf.loc.Entities, node.ID)
	}
}

func (sf *surfacer) push(list *[]string, id string) {
	if sf.seen == nil {
		sf.seen = map[string]bool{}
	}
	key := fmt.Sprintf("%p|%s", list, id)
	if !sf.seen[key] {
		sf.seen[key] = true
		*list = append(*list, id)
	}
}

// visible keeps the ids that still appear in the (possibly cut)
// observation text.
func visible(loc schema.Locations, obs string) schema.Locations {
	keep := func(ids []string) []string {
		var out []string
		for _, id := range ids {
			if strings.Contains(obs, id) {
				out = append(out, id)
			}
		}
		return out
	}
	return schema.Locations{Files: keep(loc.Files), Modules: keep(loc.Modules), Entities: keep(loc.Entities)}
}

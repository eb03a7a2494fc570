// Package dataset reads SWE-bench-style datasets (JSONL, or Parquet with
// the same columns) into schema.Instance values and validates every row. A
// bad row yields a RowError that names its line and reason; by default bad
// rows are skipped and counted, in strict mode the first one fails the load.
package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/diff"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/schema"
)

// RowError describes one rejected row.
type RowError struct {
	// Line is the 1-based line (JSONL) or row (Parquet) number.
	Line       int
	InstanceID string
	Reason     string
}

func (e *RowError) Error() string {
	if e.InstanceID != "" {
		return fmt.Sprintf("line %d (%s): %s", e.Line, e.InstanceID, e.Reason)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// Error is a dataset that cannot be used as given — missing or
// unreadable, without rows, without a single valid row, or with a bad row
// in strict mode: the input is at fault, not the work.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("dataset %s: %v", e.Path, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// RepoChecker verifies that a repository and commit exist. The coordinator
// and the gold command pass one backed by the --repos folder; nil skips the
// check.
type RepoChecker interface {
	CheckCommit(ctx context.Context, repo, commit string) error
}

// SnapshotWriter is a RepoChecker that also writes a patched snapshot
// (gitrepo.Set): a SWE-smith row whose patch does not apply to its base is
// then rejected with its line, as a missing commit is.
type SnapshotWriter interface {
	Snapshot(repo, base, patch, label string) (string, error)
}

// Options control validation.
type Options struct {
	// Strict makes the first bad row fail the load.
	Strict bool
	// Repos, when set, must know every row's repository and base commit.
	Repos RepoChecker
	// WithRequirements appends a row's requirements and interface fields
	// (SWE-bench Pro's) to its problem statement. They name the files and
	// functions to change, so they leak the answer: the paper's agent
	// sees the problem statement alone, the default.
	WithRequirements bool
	// Languages decide each instance's languages (Instance.Languages):
	// the run's, or the row's own (repo_language, language), or Python.
	// A row naming a language a2farm does not read is rejected. The zero
	// Selection leaves them empty.
	Languages lang.Selection
}

// rowLanguageKeys are the columns that name a row's language:
// SWE-bench Pro's, then Multi-SWE-bench's.
var rowLanguageKeys = []string{"repo_language", "language"}

// Result is a loaded dataset.
type Result struct {
	// Rows counts the rows read (blank lines are none).
	Rows      int
	Instances []schema.Instance
	// Skipped are the rejected rows (always empty in strict mode).
	Skipped []*RowError
}

// Log tells the user what was read: a warning for each skipped row, with
// its line and, where the row has one, its instance; then the counts.
func (r *Result) Log(log zerolog.Logger) {
	for _, s := range r.Skipped {
		ev := log.Warn().Int("line", s.Line)
		if s.InstanceID != "" {
			ev = ev.Str("instance", s.InstanceID)
		}
		ev.Msg("skipping row: " + s.Reason)
	}
	log.Info().Int("rows", r.Rows).Int("instances", len(r.Instances)).Int("skipped", len(r.Skipped)).Msg("dataset read")
}

// Summary is the counts in words: "2 rows read, 1 skipped".
func (r *Result) Summary() string {
	if len(r.Skipped) == 0 {
		return fmt.Sprintf("%d dataset rows read", r.Rows)
	}
	return fmt.Sprintf("%d dataset rows read, %d skipped (the warnings say why)", r.Rows, len(r.Skipped))
}

// Load reads a .jsonl/.json file, or a .parquet file. A dataset that
// cannot be used — including one whose every row is invalid — is an
// *Error; a cancelled context is returned as it is.
func Load(ctx context.Context, path string, opts Options) (*Result, error) {
	res, err := load(ctx, path, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Path: path, Err: err}
	}
	if len(res.Instances) == 0 {
		return nil, &Error{Path: path, Err: fmt.Errorf("%w: all %d rows are invalid (first: %v)", ErrNoValidRows, len(res.Skipped), res.Skipped[0])}
	}
	return res, nil
}

func load(ctx context.Context, path string, opts Options) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, pe.Err // the path is in the message already
		}
		return nil, err
	}
	defer f.Close()
	if strings.HasSuffix(strings.ToLower(path), ".parquet") {
		rows, err := readParquet(ctx, f)
		if err != nil {
			return nil, err
		}
		return validateAll(ctx, rows, opts)
	}
	return Read(ctx, f, opts)
}

// rawRow is one undecoded row with its position.
type rawRow struct {
	line   int
	fields map[string]json.RawMessage
	err    error
}

// Read reads JSON lines from r. Blank lines are ignored.
func Read(ctx context.Context, r io.Reader, opts Options) (*Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20) // patches and statements can be large
	var rows []rawRow
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		row := rawRow{line: line}
		if err := json.Unmarshal(text, &row.fields); err != nil {
			row.err = schema.DescribeJSONLine(text, err)
		} else if row.fields == nil {
			row.err = errors.New("invalid JSON: want an object, got null")
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read line %d: %w", line+1, err)
	}
	return validateAll(ctx, rows, opts)
}

func validateAll(ctx context.Context, rows []rawRow, opts Options) (*Result, error) {
	if len(rows) == 0 {
		return nil, ErrEmpty
	}
	res := &Result{Rows: len(rows)}
	seen := map[string]int{}
	for _, row := range rows {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inst, rerr := validate(ctx, row, seen, opts)
		if rerr != nil {
			if opts.Strict {
				return nil, rerr
			}
			res.Skipped = append(res.Skipped, rerr)
			continue
		}
		seen[inst.InstanceID] = row.line
		res.Instances = append(res.Instances, inst)
	}
	return res, nil
}

// ErrEmpty is a dataset without a single row; ErrNoValidRows one whose
// every row was rejected.
var (
	ErrEmpty       = errors.New("the dataset has no rows")
	ErrNoValidRows = errors.New("no valid row")
)

var (
	repoPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.][A-Za-z0-9_.-]*$`)
	commitPattern = regexp.MustCompile(`^[0-9a-fA-F]{7,40}$`)
	// swesmithRepo is SWE-smith's mirror of a repository at one commit:
	// swesmith/<owner>__<name>.<commit>.
	swesmithRepo = regexp.MustCompile(`^swesmith/([A-Za-z0-9][A-Za-z0-9_.-]*?)__([A-Za-z0-9_.][A-Za-z0-9_.-]*)\.([0-9a-fA-F]{7,40})$`)
)

// required are the fields every row must carry, as non-empty strings.
var required = []string{"instance_id", "repo", "base_commit", "problem_statement", "patch"}

func validate(ctx context.Context, row rawRow, seen map[string]int, opts Options) (schema.Instance, *RowError) {
	fail := func(id, format string, args ...any) (schema.Instance, *RowError) {
		return schema.Instance{}, &RowError{Line: row.line, InstanceID: id, Reason: fmt.Sprintf(format, args...)}
	}
	if row.err != nil {
		return fail("", "%v", row.err)
	}
	values := map[string]string{}
	var id string
	if raw, ok := row.fields["instance_id"]; ok {
		_ = json.Unmarshal(raw, &id)
	}
	smith := swesmithMirror(row.fields)
	for _, key := range required {
		raw, ok := row.fields[key]
		if key == "base_commit" && smith != nil && (!ok || string(raw) == "null") {
			continue // the mirror's name holds it
		}
		if !ok || string(raw) == "null" {
			return fail(id, "missing field %q", key)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fail(id, "field %q must be a string", key)
		}
		if strings.TrimSpace(s) == "" {
			return fail(id, "field %q is empty", key)
		}
		values[key] = s
	}
	if prev, dup := seen[id]; dup {
		return fail(id, "duplicate instance_id (first on line %d)", prev)
	}
	var basePatch string
	if smith != nil && values["base_commit"] == "" {
		// A SWE-smith row: the snapshot is the mirror's commit with the row's
		// patch, which introduces the bug, applied; the fix to locate undoes it.
		values["repo"], values["base_commit"] = smith[1]+"/"+smith[2], smith[3]
		basePatch, values["patch"] = values["patch"], diff.Reverse(values["patch"])
	}
	if !repoPattern.MatchString(values["repo"]) || strings.Contains(values["repo"], "..") {
		return fail(id, "repo %q is not owner/name", values["repo"])
	}
	if !commitPattern.MatchString(values["base_commit"]) {
		return fail(id, "base_commit %q is not a commit id (7-40 hex digits)", values["base_commit"])
	}
	var rowLanguage string
	for _, key := range rowLanguageKeys {
		if raw, ok := row.fields[key]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &rowLanguage); err != nil {
				return fail(id, "field %q must be a string", key)
			}
			break
		}
	}
	languages, err := opts.Languages.ForRow(rowLanguage)
	if err != nil {
		return fail(id, "%v", err)
	}
	if opts.Repos != nil {
		if err := opts.Repos.CheckCommit(ctx, values["repo"], values["base_commit"]); err != nil {
			return fail(id, "%v", err)
		}
		if sw, ok := opts.Repos.(SnapshotWriter); ok && basePatch != "" {
			if _, err := sw.Snapshot(values["repo"], values["base_commit"], basePatch, id); err != nil {
				return fail(id, "%v", err)
			}
		}
	}
	extra := map[string]json.RawMessage{}
	for k, v := range row.fields {
		if !isRequired(k) {
			extra[k] = v
		}
	}
	inst := schema.Instance{
		InstanceID:       id,
		Repo:             values["repo"],
		BaseCommit:       values["base_commit"],
		ProblemStatement: values["problem_statement"],
		Patch:            values["patch"],
		BasePatch:        basePatch,
		Languages:        languages,
	}
	if opts.WithRequirements {
		inst.ProblemStatement = appendRequirements(inst.ProblemStatement, row.fields)
	}
	if len(extra) > 0 {
		inst.Extra, _ = json.Marshal(extra) // keys sorted: stable output
	}
	return inst, nil
}

// appendRequirements adds a SWE-bench Pro row's requirements and interface
// to its problem statement, under the headings SWE-bench Pro's own agent
// set-up uses.
func appendRequirements(problem string, fields map[string]json.RawMessage) string {
	for _, part := range []struct{ key, heading string }{
		{"requirements", "Requirements:"},
		{"interface", "New interfaces introduced:"},
	} {
		var text string
		if raw, ok := fields[part.key]; ok && json.Unmarshal(raw, &text) == nil && strings.TrimSpace(text) != "" {
			problem += "\n\n" + part.heading + "\n" + strings.TrimSpace(text)
		}
	}
	return problem
}

// swesmithMirror matches a row's repo against SWE-smith's mirror names:
// nil, or the match (owner, name, commit at 1, 2, 3).
func swesmithMirror(fields map[string]json.RawMessage) []string {
	var repo string
	if raw, ok := fields["repo"]; !ok || json.Unmarshal(raw, &repo) != nil {
		return nil
	}
	return swesmithRepo.FindStringSubmatch(repo)
}

func isRequired(key string) bool {
	for _, k := range required {
		if k == key {
			return true
		}
	}
	return false
}

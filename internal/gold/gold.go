// Package gold extracts gold locations from an instance's gold patch, the
// way the reference generator (LocAgent's gen_oracle_locations) does:
// changed lines of each edited source file are mapped to the entities that
// contain them, before and after the patch. Each edited file is read by its
// own language through the lang contract, whose gold rule (lang.GoldRule)
// says which entity a changed line edits; a patch may touch several
// languages. Here live the rules every language shares: blank lines never
// count; a line removed maps through the base file, a line added through
// the patched file, where an entity the base file lacks is added rather
// than edited; an entity's module is its first dotted segment. It fixes the
// generator's one crash: a patch that adds or deletes a source file treats
// the missing side as an empty file.
package gold

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/internal/diff"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/schema"
)

// DefaultMaxEditFiles is the default limit on edited source files, as in
// the reference's SWE-Gym wrapper; instances above it get null gold.
const DefaultMaxEditFiles = 10

// Options tune extraction.
type Options struct {
	// Languages parse the edited files, each file by the language whose
	// source extension it has; files of no language do not count. An
	// instance naming its languages (Instance.Languages) is read with
	// those of them only. Required.
	Languages *lang.Set
	// MaxEditFiles: instances that edit more source files get null gold.
	// Zero means no limit.
	MaxEditFiles int
	// ReferenceNulls gives null gold exactly where the reference generator
	// fails — a patch that creates or deletes a source file — so that an
	// evaluation skips the instances the paper's evaluation skipped. Off,
	// the missing side of such a file is an empty file and the instance
	// gets its gold (what training wants).
	ReferenceNulls bool
}

// FileReader reads a file of the repository at the instance's base commit.
// It returns an error wrapping an error for which IsNotFound is true when
// the path does not exist.
type FileReader interface {
	ReadFile(path string) ([]byte, error)
}

// Result is the outcome for one instance.
type Result struct {
	Gold schema.Gold
	// NullReason says why Gold.FileChanges is null; empty when it is not.
	NullReason string
}

// Extractor turns gold patches into gold rows. It owns a parser per
// language and is not safe for concurrent use.
type Extractor struct {
	parsers    map[string]lang.Parser // by language name, made on first use
	opts       Options
	isNotFound func(error) bool
}

// NewExtractor returns an extractor. isNotFound recognises the FileReader's
// "no such file" errors.
func NewExtractor(opts Options, isNotFound func(error) bool) (*Extractor, error) {
	if opts.MaxEditFiles < 0 {
		return nil, fmt.Errorf("max edit files must be >= 0, got %d", opts.MaxEditFiles)
	}
	if opts.Languages.Len() == 0 {
		return nil, errors.New("gold: no language")
	}
	return &Extractor{parsers: map[string]lang.Parser{}, opts: opts, isNotFound: isNotFound}, nil
}

// Close releases the parsers.
func (e *Extractor) Close() {
	for _, p := range e.parsers {
		p.Close()
	}
}

// ErrBadPatch marks a patch that cannot be parsed: bad input, not an
// infrastructure failure.
var ErrBadPatch = errors.New("bad patch")

// Extract computes the gold row of one instance, reading files at its base
// commit through src.
func (e *Extractor) Extract(inst schema.Instance, src FileReader) (Result, error) {
	res := Result{Gold: schema.Gold{
		InstanceID:       inst.InstanceID,
		Repo:             inst.Repo,
		BaseCommit:       inst.BaseCommit,
		ProblemStatement: inst.ProblemStatement,
		Patch:            inst.Patch,
	}}
	patches, err := diff.Parse(inst.Patch)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrBadPatch, err)
	}
	// The instance's languages only: a Python instance's gold never names
	// the JavaScript its patch also edits.
	langs, err := e.opts.Languages.Select(inst.Languages)
	if err != nil {
		return res, fmt.Errorf("instance languages: %w", err)
	}
	var sources []diff.FilePatch
	seen := map[string]bool{}
	for _, fp := range patches {
		if p := fp.Path(); langs.HasExtension(p) && !seen[p] && !skipsGold(langs.Source(p), p) {
			seen[p] = true
			sources = append(sources, fp)
		}
	}
	exts := strings.Join(langs.Extensions(), "/")
	switch {
	case len(sources) == 0:
		res.NullReason = fmt.Sprintf("the patch edits no %s file", exts)
		return res, nil
	case e.opts.MaxEditFiles > 0 && len(sources) > e.opts.MaxEditFiles:
		res.NullReason = fmt.Sprintf("the patch edits %d %s files (limit %d)", len(sources), exts, e.opts.MaxEditFiles)
		return res, nil
	}
	if e.opts.ReferenceNulls {
		for _, fp := range sources {
			if fp.Added() || fp.Deleted() {
				verb := "creates"
				if fp.Deleted() {
					verb = "deletes"
				}
				res.NullReason = fmt.Sprintf("the patch %s %s, where the reference generator fails (--reference-nulls)", verb, fp.Path())
				return res, nil
			}
		}
	}
	changes := make([]schema.FileChange, 0, len(sources))
	for _, fp := range sources {
		fc, reason, err := e.fileChange(fp, src)
		if err != nil {
			return res, err
		}
		if reason != "" {
			res.NullReason = reason
			return res, nil
		}
		changes = append(changes, fc)
	}
	res.Gold.FileChanges = changes
	return res, nil
}

// skipsGold reports whether the file's language keeps it out of gold.
func skipsGold(l lang.Language, path string) bool {
	gs, ok := l.(lang.GoldSkipper)
	return ok && gs.SkipsGold(path)
}

// fileChange maps the hunks of one file patch to entities. A non-empty
// reason means the instance gets null gold (the reference drops instances
// whose patch does not apply).
func (e *Extractor) fileChange(fp diff.FilePatch, src FileReader) (schema.FileChange, string, error) {
	path := fp.Path()
	var oldText []byte
	if !fp.Added() {
		data, err := src.ReadFile(path)
		switch {
		case err != nil && e.isNotFound != nil && e.isNotFound(err):
			return schema.FileChange{}, fmt.Sprintf("%s does not exist at base_commit", path), nil
		case err != nil:
			return schema.FileChange{}, "", fmt.Errorf("read %s: %w", path, err)
		}
		oldText = data
	}
	oldLines := diff.SplitLines(string(oldText))
	newLines, offsets, err := diff.Apply(oldLines, fp)
	if err != nil {
		return schema.FileChange{}, fmt.Sprintf("%s: %v", path, err), nil
	}
	oldStruct, err := e.goldRule(path, oldText, fp.Added())
	if err != nil {
		return schema.FileChange{}, "", err
	}
	newStruct, err := e.goldRule(path, []byte(strings.Join(newLines, "\n")+"\n"), fp.Deleted())
	if err != nil {
		return schema.FileChange{}, "", err
	}

	var edited, added []string // "C.m", "f" or "C", in first-seen order
	for i, h := range fp.Hunks {
		for _, l := range h.Lines {
			if l.Kind != diff.Removed || strings.TrimSpace(l.Text) == "" {
				continue
			}
			if e, ok := oldStruct.EntityAt(l.OldNo+offsets[i], l.Text); ok && !slices.Contains(edited, e.Name) {
				edited = append(edited, e.Name)
			}
		}
		for _, l := range h.Lines {
			if l.Kind != diff.Added || strings.TrimSpace(l.Text) == "" {
				continue
			}
			e, ok := newStruct.EntityAt(l.NewNo+offsets[i], l.Text)
			if !ok || slices.Contains(edited, e.Name) || slices.Contains(added, e.Name) {
				continue
			}
			if oldStruct.Has(e) {
				edited = append(edited, e.Name)
			} else {
				added = append(added, e.Name)
			}
		}
	}
	fc := schema.FileChange{File: path}
	fc.Changes.EditedEntities, fc.Changes.EditedModules = ids(path, edited)
	fc.Changes.AddedEntities, fc.Changes.AddedModules = ids(path, added)
	return fc, "", nil
}

// ids turns "C.m" / "f" names into entity and module ids of a file.
func ids(path string, names []string) (entities, modules []string) {
	for _, n := range names {
		entities = append(entities, path+":"+n)
		module := path + ":" + strings.SplitN(n, ".", 2)[0]
		if !slices.Contains(modules, module) {
			modules = append(modules, module)
		}
	}
	return entities, modules
}

// goldRule is the gold rule of one side of a file patch, read by the
// file's language; a side the patch adds or deletes has no entities.
func (e *Extractor) goldRule(path string, src []byte, missing bool) (lang.GoldRule, error) {
	if missing {
		return lang.NoGold{}, nil
	}
	l := e.opts.Languages.Source(path)
	p, ok := e.parsers[l.Name()]
	if !ok {
		var err error
		if p, err = l.NewParser(); err != nil {
			return nil, err
		}
		e.parsers[l.Name()] = p
	}
	f, err := p.Parse(path, src)
	if err != nil {
		return nil, err
	}
	return l.Gold(f), nil
}

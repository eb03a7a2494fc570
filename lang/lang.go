// Package lang is the contract between a2farm and the programming
// languages it reads. It holds the language-neutral code model — parsed
// files with definitions, line spans, imports and calls, and the code graph
// of a snapshot — and the Language interface that each language implements
// in a package of its own under lang/ (lang/python is the first). The code
// graph builder, the tools, gold extraction, answer parsing, rewards and
// metrics see languages only through this package.
//
// A snapshot is read with every registered language (a Set), each file by
// the language that reads it; a repository may mix languages.
package lang

import "strings"

// Parser parses source files of one language. A Parser is not safe for
// concurrent use; give each goroutine its own.
type Parser interface {
	Parse(path string, src []byte) (*File, error)
	Close()
}

// Language is what every language must answer. docs/ARCHITECTURE.md says
// how to add one.
type Language interface {
	// Name identifies the language in logs, metrics and cache keys
	// ("python").
	Name() string
	// Version changes whenever the language's output for the same source
	// changes (grammar, definitions, ids, links, gold): cache keys hold it.
	Version() string
	// Extensions are the language's source file extensions (".py"): gold
	// comes from files with them, and answers, tool defaults and mention
	// rules look for paths ending in them.
	Extensions() []string
	// Reads reports whether the code graph reads a file as this language;
	// it may take more than Extensions (Python also reads Cython).
	Reads(path string) bool
	// IsTest reports whether a file holds tests, which the tools hide and
	// gold never names.
	IsTest(path string) bool
	// NewParser returns a parser for the language's files.
	NewParser() (Parser, error)
	// Definitions lists the definitions of a parsed file that are nodes of
	// the code graph, each after its parent, with their ids' qualified
	// names. ok is false when the parse cannot be trusted: the file is then
	// a node of its own, outside the directory tree and unlinked.
	Definitions(f *File) (defs []Definition, ok bool)
	// Link adds the imports, invokes and inherits edges of the language's
	// files (units, in path order) to g, whose nodes and contains edges are
	// in place: imports resolved to repository files, folders or
	// definitions, calls and inheritance to definitions.
	Link(g *Graph, units []Unit)
	// Gold returns the gold rule of one version of a parsed file: which
	// entity a changed line edits.
	Gold(f *File) GoldRule
	// CanonicalID maps an entity id to the one metrics and tools compare
	// (Python folds an initializer, "f.py:C.__init__", into its class).
	CanonicalID(id string) string
	// IsComment reports whether a source line, spaces trimmed, is a comment
	// only.
	IsComment(line string) bool
	// BodyElision is the text that stands for a function's body in an
	// outline, indented one level below the signature ("..." in Python).
	BodyElision() string
}

// ProjectFiler is a language whose links need files that are not its
// sources — Go's go.mod files, which give a folder its import path. The
// snapshot reader reads every file one reports, and Link finds them in
// Graph.Project; they are not nodes of the graph.
type ProjectFiler interface {
	ReadsProjectFile(path string) bool
}

// GoldSkipper is a language some of whose source files never give gold
// (Go's tests: _test.go files and testdata/). Python has none: its gold
// keeps the reference generator's, which reads every edited .py file.
type GoldSkipper interface {
	SkipsGold(path string) bool
}

// ModuleNamer is a language whose answers name an entity's module by its
// own rule rather than the reference's (the entity's parent): Java's
// nested types belong to the module of their outermost type, as its gold
// says. qual is the entity's QualName.
type ModuleNamer interface {
	ModuleOf(qual string) string
}

// Entity is what a changed line edits: a method ("C.m"), a function ("f")
// or a class ("C", with Class set). The gold module of an entity is the
// first dotted segment of its name.
type Entity struct {
	Name  string
	Class bool
}

// GoldRule maps the changed lines of one version of a file to entities.
type GoldRule interface {
	// EntityAt maps a changed line (1-based, with its text) to its entity;
	// ok is false for lines that give file-level gold only.
	EntityAt(line int, text string) (e Entity, ok bool)
	// Has reports whether an entity found in the patched file exists in
	// this (base) version, which makes it edited rather than added.
	Has(e Entity) bool
}

// NoGold is the gold rule of a file that does not exist on one side of a
// patch: no line maps, no entity exists.
type NoGold struct{}

// EntityAt maps nothing.
func (NoGold) EntityAt(int, string) (Entity, bool) { return Entity{}, false }

// Has finds nothing.
func (NoGold) Has(Entity) bool { return false }

// SpanGold is a gold rule of definitions by their line spans, for
// languages whose definitions nest simply (Go, TypeScript): a changed line
// names the first added span that holds it — add a class's methods before
// the class — and a comment line, or a line outside every span, gives the
// file only.
type SpanGold struct {
	spans     []entitySpan
	names     map[string]bool
	isComment func(line string) bool
}

type entitySpan struct {
	entity Entity
	span   Span
}

// NewSpanGold returns an empty rule; isComment is the language's
// IsComment.
func NewSpanGold(isComment func(line string) bool) *SpanGold {
	return &SpanGold{names: map[string]bool{}, isComment: isComment}
}

// Add makes lines in span name e.
func (g *SpanGold) Add(e Entity, span Span) {
	g.spans = append(g.spans, entitySpan{e, span})
	g.names[e.Name] = true
}

// EntityAt names the first span that holds the line.
func (g *SpanGold) EntityAt(line int, text string) (Entity, bool) {
	if g.isComment(strings.TrimSpace(text)) {
		return Entity{}, false
	}
	for _, s := range g.spans {
		if s.span.Contains(line) {
			return s.entity, true
		}
	}
	return Entity{}, false
}

// Has reports whether this version of the file defines the entity.
func (g *SpanGold) Has(e Entity) bool { return g.names[e.Name] }

package lang

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Span is a range of source lines, 1-based and inclusive at both ends.
type Span struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Contains reports whether line lies inside the span.
func (s Span) Contains(line int) bool { return line >= s.Start && line <= s.End }

// DefKind says whether a definition is a class or a function.
type DefKind uint8

// Definition kinds.
const (
	KindClass DefKind = iota + 1
	KindFunction
)

func (k DefKind) String() string {
	switch k {
	case KindClass:
		return "class"
	case KindFunction:
		return "function"
	}
	return "unknown"
}

// MarshalText makes kinds readable in JSON output.
func (k DefKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (k *DefKind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "class":
		*k = KindClass
	case "function":
		*k = KindFunction
	default:
		return fmt.Errorf("unknown definition kind %q", b)
	}
	return nil
}

// Def is a class or function definition (methods and nested definitions
// included).
type Def struct {
	Kind DefKind `json:"kind"`
	Name string  `json:"name"`
	// QualName is the dotted path from the module, e.g. "Outer.method.inner".
	QualName string `json:"qual_name"`
	Async    bool   `json:"async,omitempty"`
	// Method is true for a function defined directly in a class body.
	Method bool `json:"method,omitempty"`
	// Span runs from the definition's keyword line (`def`, `async def`,
	// `class` in Python) to the last line of the body, like Python's ast
	// lineno/end_lineno: decorators are outside it and trailing comments do
	// not extend it.
	Span Span `json:"span"`
	// BodyStart is the first line of the body (after the signature).
	BodyStart  int         `json:"body_start"`
	Decorators []Decorator `json:"decorators,omitempty"`
	Docstring  *Docstring  `json:"docstring,omitempty"`
	// Bases are the base-class expressions of a class as written ("Base",
	// "mod.Base"); keyword arguments such as metaclass= are left out.
	Bases []string `json:"bases,omitempty"`
	// Calls are the call sites in this definition's own body, not in nested
	// definitions, plus the calls inside its decorators (InDecorator set).
	Calls    []Call `json:"calls,omitempty"`
	Children []*Def `json:"children,omitempty"`

	// StartByte and EndByte delimit the definition's source (without
	// decorators), for callers that need its code.
	StartByte uint32 `json:"-"`
	EndByte   uint32 `json:"-"`

	// Depth is the definition's depth in the syntax tree as the language's
	// own compiler sees it (Python's ast; module-level definitions are 1),
	// which orders BreadthFirst like ast.walk.
	Depth int `json:"depth"`
}

// FirstLine is the definition's first line, its decorators included.
func (d *Def) FirstLine() int {
	start := d.Span.Start
	for _, dec := range d.Decorators {
		start = min(start, dec.Span.Start)
	}
	return start
}

// Decorator is one `@expr` line (or lines) of a decorated definition.
type Decorator struct {
	Span Span `json:"span"`
	// Name is the decorator expression without its call arguments,
	// e.g. "property" or "app.route".
	Name string `json:"name"`
}

// Docstring is a string literal that is the first statement of a module,
// class or function body.
type Docstring struct {
	// Span covers the literal as written in the source.
	Span Span `json:"span"`
	// Text is the literal's value (escapes decoded), before any cleaning.
	Text string `json:"text"`
}

// Import is one import statement.
type Import struct {
	Span Span `json:"span"`
	// From is true for `from m import ...`.
	From bool `json:"from,omitempty"`
	// Level is the number of leading dots of a relative import.
	Level int `json:"level,omitempty"`
	// Module is the module name as written, without leading dots
	// (empty for `from . import x` and for plain `import a, b`).
	Module string `json:"module,omitempty"`
	// Resolved is the absolute dotted module name for from-imports, with
	// relative imports resolved against the importing file's package. It is
	// empty when a relative import climbs above the repository root.
	Resolved string       `json:"resolved,omitempty"`
	Names    []ImportName `json:"names,omitempty"`
	Star     bool         `json:"star,omitempty"`
	// Scope is the QualName of the innermost enclosing definition, or ""
	// for module level.
	Scope string `json:"scope,omitempty"`
	// Direct is true when the statement sits directly in the body of its
	// scope, not inside an if/try/with or other compound statement.
	Direct bool `json:"direct,omitempty"`
	// Depth is the statement's depth in the syntax tree, counted like Def's
	// (module level is 1).
	Depth int `json:"depth"`
}

// ImportName is one imported name; for `import a.b as c` Name is "a.b" and
// Alias is "c".
type ImportName struct {
	Name  string `json:"name"`
	Alias string `json:"alias,omitempty"`
}

// Assignment is a module-level simple (`x = ...`) or annotated
// (`x: T = ...`) assignment statement.
type Assignment struct {
	Span      Span     `json:"span"`
	Targets   []string `json:"targets"`
	Annotated bool     `json:"annotated,omitempty"`
}

// Call is a call site: a bare name gives Name, `obj.attr(...)` gives the
// attribute with Attribute set.
type Call struct {
	Name        string `json:"name"`
	Attribute   bool   `json:"attribute,omitempty"`
	Line        int    `json:"line"`
	InDecorator bool   `json:"in_decorator,omitempty"`
}

// File is the structure of one parsed source file.
type File struct {
	Path  string `json:"path"`
	Lines int    `json:"lines"`
	// Package is the package the file declares, for languages whose files
	// name theirs (Java's "com.example.util"); "" when none.
	Package string `json:"package,omitempty"`
	// Defs are the top-level definitions in source order; nested ones hang
	// off Children.
	Defs        []*Def       `json:"defs,omitempty"`
	Imports     []Import     `json:"imports,omitempty"`
	Assignments []Assignment `json:"assignments,omitempty"`
	Docstring   *Docstring   `json:"docstring,omitempty"`
	// Calls are module-level call sites (outside every definition).
	Calls []Call `json:"calls,omitempty"`
	// HasErrors is true when tree-sitter had to recover from a syntax error;
	// the structure is then best effort.
	HasErrors bool `json:"has_errors,omitempty"`
	// LegacySyntax is true when the language's current compiler would
	// reject the file although the grammar parses it (for Python: Python 2
	// print or exec statements, or a str literal with a truncated \u, \U
	// or \N escape).
	LegacySyntax bool `json:"legacy_syntax,omitempty"`
}

// InFolder reports whether a folder on p's path (not p's own name) is
// one of names: the folder rules of Reads and IsTest.
func InFolder(p string, names ...string) bool {
	for _, seg := range strings.Split(path.Dir(p), "/") {
		if slices.Contains(names, seg) {
			return true
		}
	}
	return false
}

// CountLines counts the lines of a source file, a last line without a
// newline included.
func CountLines(src []byte) int {
	if len(src) == 0 {
		return 0
	}
	n := bytes.Count(src, []byte{'\n'})
	if src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// ImportsBreadthFirst returns the imports by depth, then source order (the
// order Python's ast.walk meets them).
func (f *File) ImportsBreadthFirst() []Import {
	out := slices.Clone(f.Imports)
	slices.SortStableFunc(out, func(a, b Import) int { return a.Depth - b.Depth })
	return out
}

// Walk visits every definition depth-first in source order; returning false
// from fn skips the definition's children.
func (f *File) Walk(fn func(*Def) bool) {
	var visit func([]*Def)
	visit = func(defs []*Def) {
		for _, d := range defs {
			if fn(d) {
				visit(d.Children)
			}
		}
	}
	visit(f.Defs)
}

// BreadthFirst returns every definition by depth, then source position
// (the order Python's ast.walk yields them). The reference gold extractor
// depends on this order.
func (f *File) BreadthFirst() []*Def {
	var all []*Def
	f.Walk(func(d *Def) bool { all = append(all, d); return true })
	// Walk yields source order (pre-order DFS); a stable sort by ast depth
	// turns it into breadth-first order, because at equal depth ast.walk
	// visits nodes in source order.
	slices.SortStableFunc(all, func(a, b *Def) int { return a.Depth - b.Depth })
	return all
}

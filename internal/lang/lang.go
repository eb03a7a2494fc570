// Package lang is the seam between a2farm and the programming languages it
// reads. It holds the language-neutral code model that parsers produce —
// definitions with line spans, imports, calls — and the Language interface
// that a language implements: parse a file, say which files are source and
// which are tests, resolve a module name to files. The code graph, the
// tools, gold extraction, answer parsing and rewards work through it.
//
// Python (internal/pyparse) is the one implementation; a new language is a
// new package that implements Language with its grammar.
package lang

import (
	"regexp"
	"strings"
)

// Parser parses source files of one language. A Parser is not safe for
// concurrent use; give each goroutine its own.
type Parser interface {
	Parse(path string, src []byte) (*File, error)
	Close()
}

// Language is what a2farm needs to know about a programming language.
type Language interface {
	// Name identifies the language in logs and cache keys ("python").
	Name() string
	// NewParser returns a parser for the language's source files.
	NewParser() (Parser, error)
	// Extensions are the language's source file extensions (".py"): gold
	// comes from files with them, and answers, tool defaults and mention
	// rules look for paths ending in them.
	Extensions() []string
	// Indexed reports whether the code graph parses a file; it may take
	// more than Extensions (Python also indexes Cython .pyx and .pxd).
	Indexed(path string) bool
	// IsTest reports whether a file holds tests, which code search leaves
	// out by default.
	IsTest(path string) bool
	// ModuleFiles lists, in order of preference, the files a dotted module
	// name may live in ("a.b" → "a/b.py", "a/b/__init__.py").
	ModuleFiles(module string) []string
	// PackageFile reports whether a file is a package's own module
	// (__init__.py), whose imported names the package re-exports.
	PackageFile(path string) bool
	// Initializer is the name of the method that initialises an instance
	// ("__init__"): the graph gives it no node of its own, its calls count
	// for the class, and metrics fold "C.__init__" into "C".
	Initializer() string
	// DocstringLines is the number of lines of a docstring once cleaned as
	// the language's own tools show it (inspect.cleandoc); 0 when empty.
	DocstringLines(text string) int
}

// HasExtension reports whether path ends in one of l's source extensions.
func HasExtension(l Language, path string) bool {
	for _, ext := range l.Extensions() {
		if strings.HasSuffix(path, ext) {
			return true
		}
	}
	return false
}

// ExtensionPattern is a regular expression that matches one of l's source
// extensions: `\.py` for one, `(?:\.py|\.pyi)` for several.
func ExtensionPattern(l Language) string {
	exts := l.Extensions()
	quoted := make([]string, len(exts))
	for i, ext := range exts {
		quoted[i] = regexp.QuoteMeta(ext)
	}
	if len(quoted) == 1 {
		return quoted[0]
	}
	return "(?:" + strings.Join(quoted, "|") + ")"
}

// SourceGlob is the glob that matches every source file of l at any depth
// ("**/*.py"), the tools' default file pattern.
func SourceGlob(l Language) string {
	exts := l.Extensions()
	if len(exts) == 1 {
		return "**/*" + exts[0]
	}
	return "**/*{" + strings.Join(exts, ",") + "}"
}

// QualifiedInitializer is the suffix ".__init__" that a method id of the
// initializer ends with.
func QualifiedInitializer(l Language) string { return "." + l.Initializer() }

// TrimExtension removes the source extension of l that path ends in; ok is
// false when it ends in none.
func TrimExtension(l Language, path string) (stem string, ok bool) {
	for _, ext := range l.Extensions() {
		if s, found := strings.CutSuffix(path, ext); found {
			return s, true
		}
	}
	return path, false
}

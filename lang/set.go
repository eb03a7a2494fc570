package lang

import (
	"regexp"
	"strings"
)

// Set is the languages a snapshot is read with, in registration order: a
// file is read by the first language that reads it.
type Set struct {
	langs []Language
}

// NewSet returns the set of langs, in the order given.
func NewSet(langs ...Language) *Set { return &Set{langs: langs} }

// Languages are the set's languages in order.
func (s *Set) Languages() []Language { return s.langs }

// Len is the number of languages.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.langs)
}

// Reader returns the language that reads path for the code graph, nil when
// none does.
func (s *Set) Reader(path string) Language {
	for _, l := range s.langs {
		if l.Reads(path) {
			return l
		}
	}
	return nil
}

// Reads reports whether some language of the set reads path.
func (s *Set) Reads(path string) bool { return s.Reader(path) != nil }

// Source returns the language whose source extensions path ends in, nil
// when none.
func (s *Set) Source(path string) Language {
	for _, l := range s.langs {
		for _, ext := range l.Extensions() {
			if strings.HasSuffix(path, ext) {
				return l
			}
		}
	}
	return nil
}

// ReadsProjectFile reports whether a language of the set needs the file
// beside its sources (ProjectFiler).
func (s *Set) ReadsProjectFile(path string) bool {
	for _, l := range s.Languages() {
		if pf, ok := l.(ProjectFiler); ok && pf.ReadsProjectFile(path) {
			return true
		}
	}
	return false
}

// HasExtension reports whether path ends in a source extension of the set.
func (s *Set) HasExtension(path string) bool { return s.Source(path) != nil }

// IsTest reports whether the language of path says it holds tests.
func (s *Set) IsTest(path string) bool {
	if l := s.Reader(path); l != nil {
		return l.IsTest(path)
	}
	if l := s.Source(path); l != nil {
		return l.IsTest(path)
	}
	return false
}

// CanonicalID is the id the CanonicalID of the id's file's language gives.
// An id whose file no language reads (a bare "C.__init__" an agent wrote)
// takes the first language's canonical form that differs from it.
func (s *Set) CanonicalID(id string) string {
	file, _, _ := strings.Cut(id, ":")
	if l := s.Reader(file); l != nil {
		return l.CanonicalID(id)
	}
	for _, l := range s.langs {
		if c := l.CanonicalID(id); c != id {
			return c
		}
	}
	return id
}

// Extensions are the source extensions of every language, in order.
func (s *Set) Extensions() []string {
	var exts []string
	for _, l := range s.langs {
		exts = append(exts, l.Extensions()...)
	}
	return exts
}

// ExtensionPattern is a regular expression that matches one of the set's
// source extensions: `\.py` for one, `(?:\.py|\.go)` for several.
func (s *Set) ExtensionPattern() string {
	exts := s.Extensions()
	quoted := make([]string, len(exts))
	for i, ext := range exts {
		quoted[i] = regexp.QuoteMeta(ext)
	}
	if len(quoted) == 1 {
		return quoted[0]
	}
	return "(?:" + strings.Join(quoted, "|") + ")"
}

// SourceGlob is the glob that matches every source file of the set at any
// depth ("**/*.py"), the tools' default file pattern.
func (s *Set) SourceGlob() string {
	exts := s.Extensions()
	if len(exts) == 1 {
		return "**/*" + exts[0]
	}
	return "**/*{" + strings.Join(exts, ",") + "}"
}

// TrimExtension removes the source extension that path ends in; ok is
// false when it ends in none.
func (s *Set) TrimExtension(path string) (stem string, ok bool) {
	for _, ext := range s.Extensions() {
		if stem, found := strings.CutSuffix(path, ext); found {
			return stem, true
		}
	}
	return path, false
}

// Key names the set with each language's version ("python@1"), for cache
// keys: indexes built with other languages or versions never match.
func (s *Set) Key() string {
	parts := make([]string, len(s.langs))
	for i, l := range s.langs {
		parts[i] = l.Name() + "@" + l.Version()
	}
	return strings.Join(parts, "+")
}

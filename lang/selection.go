package lang

import (
	"fmt"
	"slices"
	"strings"
)

// Aliased is a language that dataset rows and users may also name
// otherwise than by its Name: SWE-bench Pro's repo_language says "js" and
// "ts" for the language named "typescript".
type Aliased interface {
	Aliases() []string
}

// Lookup returns the language of the set that a name or an alias names,
// ignoring case.
func (s *Set) Lookup(name string) (Language, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, l := range s.Languages() {
		if l.Name() == name {
			return l, true
		}
		if a, ok := l.(Aliased); ok && slices.Contains(a.Aliases(), name) {
			return l, true
		}
	}
	return nil, false
}

// Names are the languages' names, in order.
func (s *Set) Names() []string {
	names := make([]string, s.Len())
	for i, l := range s.Languages() {
		names[i] = l.Name()
	}
	return names
}

// Select returns the languages of s that names (names or aliases) name,
// in s's order; no names select every language of s. A name s does not
// know is an error that lists the ones it does.
func (s *Set) Select(names []string) (*Set, error) {
	if len(names) == 0 {
		return s, nil
	}
	want := map[string]bool{}
	for _, name := range names {
		l, ok := s.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("%q is not a language a2farm reads (%s)", name, strings.Join(s.Names(), ", "))
		}
		want[l.Name()] = true
	}
	var out []Language
	for _, l := range s.Languages() {
		if want[l.Name()] {
			out = append(out, l)
		}
	}
	if len(out) == len(s.langs) {
		return s, nil
	}
	return NewSet(out...), nil
}

// DefaultLanguage reads the instances whose rows name no language:
// SWE-bench and SWE-bench Verified rows, whose benchmarks — and the
// paper's tools — read Python only.
const DefaultLanguage = "python"

// AllLanguages is the --languages value that reads every language a file
// matches.
const AllLanguages = "all"

// Selection is a run's rule for the languages each instance is read
// with: the ones the run names (--languages), or else the one the
// instance's row names (SWE-bench Pro's repo_language, Multi-SWE-bench's
// language), or else DefaultLanguage. The zero Selection selects
// nothing: instances keep no names, which every reader takes as all its
// languages.
type Selection struct {
	registry *Set
	fixed    []string // names; nil: each row's own
}

// ParseSelection reads a --languages value: "" for each row's own
// language, "all", or names and aliases separated by commas.
func ParseSelection(registry *Set, value string) (Selection, error) {
	sel := Selection{registry: registry}
	value = strings.TrimSpace(value)
	switch {
	case value == "":
		if _, ok := registry.Lookup(DefaultLanguage); !ok {
			return sel, fmt.Errorf("the default language %s is not registered", DefaultLanguage)
		}
		return sel, nil
	case strings.EqualFold(value, AllLanguages):
		sel.fixed = registry.Names()
		return sel, nil
	}
	var names []string
	for part := range strings.SplitSeq(value, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		if strings.EqualFold(part, AllLanguages) {
			return sel, fmt.Errorf("--languages %q: %s stands alone", value, AllLanguages)
		}
		names = append(names, part)
	}
	if len(names) == 0 {
		return sel, fmt.Errorf("--languages %q: no language named", value)
	}
	set, err := registry.Select(names)
	if err != nil {
		return sel, fmt.Errorf("--languages %q: %w", value, err)
	}
	sel.fixed = set.Names()
	return sel, nil
}

// Fixed reports whether the run names its languages, which then override
// every row's.
func (s Selection) Fixed() bool { return s.fixed != nil }

// ForRow returns the names of the languages an instance is read with,
// given what its row says its language is ("" when it says nothing).
// The zero Selection returns none.
func (s Selection) ForRow(rowLanguage string) ([]string, error) {
	switch {
	case s.registry == nil:
		return nil, nil
	case s.fixed != nil:
		return slices.Clone(s.fixed), nil
	case strings.TrimSpace(rowLanguage) == "":
		rowLanguage = DefaultLanguage
	}
	l, ok := s.registry.Lookup(rowLanguage)
	if !ok {
		return nil, fmt.Errorf("the row's language %q is not one a2farm reads (%s); --languages reads others", rowLanguage, strings.Join(s.registry.Names(), ", "))
	}
	return []string{l.Name()}, nil
}

// Set returns the languages a snapshot read without a row is read with:
// the named ones, or DefaultLanguage.
func (s Selection) Set() *Set {
	if s.registry == nil {
		return nil
	}
	names := s.fixed
	if names == nil {
		names = []string{DefaultLanguage}
	}
	set, _ := s.registry.Select(names) // checked by ParseSelection
	return set
}

// Registry is every language the selection chooses among.
func (s Selection) Registry() *Set { return s.registry }

// String is the rule as --languages would give it back.
func (s Selection) String() string {
	switch {
	case s.fixed == nil:
		return ""
	case s.registry != nil && len(s.fixed) == s.registry.Len():
		return AllLanguages
	}
	return strings.Join(s.fixed, ",")
}

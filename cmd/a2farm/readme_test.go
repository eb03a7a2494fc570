package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeExamples runs the README's one-machine examples the way a
// newcomer does after `make run` (a2farm up --out .run/up): every line of
// a fenced block that starts with `a2farm ` and says what it prints
// (`# → TEXT`) must exit 0 and print TEXT. Paths under .run/ are taken
// relative to a temporary folder.
func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := readmeExamples(string(readme))
	if len(examples) < 5 {
		t.Fatalf("found %d README examples with `# →`; the README lost its one-machine walkthrough", len(examples))
	}
	root := t.TempDir()
	local := func(s string) string { return strings.ReplaceAll(s, ".run/", filepath.Join(root, ".run")+"/") }
	if code, _, stderr := run(t, "up", "--out", local(".run/up")); code != 0 {
		t.Fatalf("up (make run): exit %d\n%s", code, stderr)
	}
	for _, ex := range examples {
		args := shellWords(t, ex.command)[1:]
		for i, a := range args {
			args[i] = local(a)
		}
		code, stdout, stderr := run(t, args...)
		if want := local(ex.prints); code != 0 || !strings.Contains(stdout+stderr, want) {
			t.Errorf("README: %s\nexit %d, want 0 and output holding %q:\n%s%s", ex.command, code, want, stdout, stderr)
		}
	}
}

// TestReadmeListsEveryMakeTarget: the README's table of targets and the
// Makefile's documented targets (what `make help` prints) are the same.
func TestReadmeListsEveryMakeTarget(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var inMakefile, inReadme []string
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z_-]+):.*## `).FindAllStringSubmatch(string(makefile), -1) {
		inMakefile = append(inMakefile, m[1])
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `make ([a-zA-Z_-]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		inReadme = append(inReadme, m[1])
	}
	slices.Sort(inMakefile)
	slices.Sort(inReadme)
	if !slices.Equal(inMakefile, inReadme) || len(inMakefile) == 0 {
		t.Errorf("make help lists %v;\nthe README's table %v", inMakefile, inReadme)
	}
}

type readmeExample struct{ command, prints string }

// readmeExamples are the `a2farm ...   # → TEXT` lines of fenced blocks.
func readmeExamples(readme string) []readmeExample {
	var out []readmeExample
	fenced := false
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		command, prints, ok := strings.Cut(line, "# →")
		if fenced && ok && strings.HasPrefix(line, "a2farm ") {
			out = append(out, readmeExample{strings.TrimSpace(command), strings.TrimSpace(prints)})
		}
	}
	return out
}

// shellWords splits a command line as sh would for the README's lines:
// words separated by blanks, with single- and double-quoted parts.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				t.Fatalf("unbalanced %c in %q", c, line)
			}
			word.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

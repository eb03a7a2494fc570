package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/a2farm/a2farm/internal/golden"
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
	// Twice in a row, as a newcomer who tries them again would: an
	// example that cannot run a second time (an --out it already used)
	// fails here.
	for pass := 1; pass <= 2; pass++ {
		for _, ex := range examples {
			args := shellWords(t, ex.command)[1:]
			for i, a := range args {
				args[i] = local(a)
			}
			code, stdout, stderr := run(t, args...)
			if want := local(ex.prints); code != 0 || !strings.Contains(stdout+stderr, want) {
				t.Errorf("README, pass %d: %s\nexit %d, want 0 and output holding %q:\n%s%s", pass, ex.command, code, want, stdout, stderr)
			}
		}
	}
}

// TestReadmeListsEveryMakeTarget: the guide's table of targets and the
// Makefile's documented targets (what `make help` prints) are the same.
func TestReadmeListsEveryMakeTarget(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../docs/GUIDE.md")
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
		t.Errorf("make help lists %v;\ndocs/GUIDE.md's table %v", inMakefile, inReadme)
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

// TestCommandsDoc: docs/COMMANDS.md is what the commands' own help says
// (make docs, or go test -run CommandsDoc -update, rewrites it).
func TestCommandsDoc(t *testing.T) {
	var buf bytes.Buffer
	if err := writeCommandsDoc(&buf, newRoot(&env{stdout: io.Discard, stderr: io.Discard, languages: languages()})); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## a2farm index graph", "## a2farm farm init", "--languages string", "| [`a2farm up`](#a2farm-up) |"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	golden.CheckFile(t, filepath.Join("..", "..", "docs", "COMMANDS.md"), buf.Bytes())
}

// TestDocLinks: every relative link of the README and docs/ names a file
// that exists and, with a #fragment, a heading of it (GitHub's anchors).
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "../../README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			content, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s links %s: %v", filepath.Base(doc), target, err)
				continue
			}
			checked++
			if fragment != "" && !slices.Contains(anchors(string(content)), fragment) {
				t.Errorf("%s links %s: no such heading in %s", filepath.Base(doc), target, filepath.Base(path))
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d links; the README lost its links", checked)
	}
}

// anchors are the ids GitHub gives a markdown file's headings: lower
// case, punctuation dropped, spaces as hyphens.
func anchors(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// Package diff parses unified diffs in git format and applies them to file
// contents in memory, reporting the line offset at which each hunk applied
// (as GNU patch prints "Hunk #n succeeded at L (offset d lines)").
package diff

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DevNull is the path git uses for the missing side of an added or deleted
// file.
const DevNull = "/dev/null"

// LineKind marks a hunk line as context, removal or addition.
type LineKind byte

// Hunk line kinds.
const (
	Context LineKind = ' '
	Removed LineKind = '-'
	Added   LineKind = '+'
)

// Line is one line of a hunk. OldNo is set for context and removed lines,
// NewNo for context and added lines (1-based, as in the hunk header).
type Line struct {
	Kind  LineKind
	Text  string
	OldNo int
	NewNo int
}

// Hunk is one @@ block. OldNoNewline and NewNoNewline record git's
// "\ No newline at end of file" after the hunk's last old-side or new-side
// line: that side's file ends there without a line terminator.
type Hunk struct {
	OldStart, OldLines         int
	NewStart, NewLines         int
	Lines                      []Line
	OldNoNewline, NewNoNewline bool
}

// FilePatch is the part of a diff that concerns one file.
type FilePatch struct {
	// OldPath and NewPath are without their a/ and b/ prefixes, or DevNull.
	OldPath, NewPath string
	Hunks            []Hunk
}

// Path is the file's path as unidiff reports it: the old path, or the new
// one for an added file.
func (fp *FilePatch) Path() string {
	if fp.OldPath == DevNull {
		return fp.NewPath
	}
	return fp.OldPath
}

// Added reports whether the patch creates the file.
func (fp *FilePatch) Added() bool { return fp.OldPath == DevNull }

// Deleted reports whether the patch deletes the file.
func (fp *FilePatch) Deleted() bool { return fp.NewPath == DevNull }

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@`)

// Parse splits a unified diff into file patches. Git extended headers
// (index, mode, rename, binary) are accepted and skipped.
func Parse(text string) ([]FilePatch, error) {
	lines := strings.Split(text, "\n")
	var files []FilePatch
	var cur *FilePatch
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "diff --git "):
			files = append(files, FilePatch{})
			cur = &files[len(files)-1]
			if a, b, ok := gitHeaderPaths(line); ok {
				cur.OldPath, cur.NewPath = a, b
			}
		case strings.HasPrefix(line, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			if cur == nil || len(cur.Hunks) > 0 {
				files = append(files, FilePatch{})
				cur = &files[len(files)-1]
			}
			cur.OldPath = headerPath(line[4:], "a/")
			cur.NewPath = headerPath(lines[i+1][4:], "b/")
			i++
		case strings.HasPrefix(line, "@@ "):
			if cur == nil {
				return nil, fmt.Errorf("line %d: hunk before any file header", i+1)
			}
			h, next, err := parseHunk(lines, i)
			if err != nil {
				return nil, err
			}
			cur.Hunks = append(cur.Hunks, h)
			i = next - 1
		}
	}
	for i := range files {
		if files[i].OldPath == "" && files[i].NewPath == "" {
			return nil, fmt.Errorf("file patch %d has no paths", i+1)
		}
	}
	return files, nil
}

func parseHunk(lines []string, i int) (Hunk, int, error) {
	m := hunkHeader.FindStringSubmatch(lines[i])
	if m == nil {
		return Hunk{}, 0, fmt.Errorf("line %d: malformed hunk header %q", i+1, lines[i])
	}
	num := func(s string, def int) int {
		if s == "" {
			return def
		}
		n, _ := strconv.Atoi(s)
		return n
	}
	h := Hunk{OldStart: num(m[1], 0), OldLines: num(m[2], 1), NewStart: num(m[3], 0), NewLines: num(m[4], 1)}
	oldNo, newNo := h.OldStart, h.NewStart
	oldLeft, newLeft := h.OldLines, h.NewLines
	j := i + 1
	for ; j < len(lines) && (oldLeft > 0 || newLeft > 0); j++ {
		l := lines[j]
		if strings.HasPrefix(l, `\`) { // "\ No newline at end of file"
			h.markNoNewline()
			continue
		}
		if l == "" { // some tools drop the space of an empty context line
			l = " "
		}
		switch LineKind(l[0]) {
		case Context:
			h.Lines = append(h.Lines, Line{Kind: Context, Text: l[1:], OldNo: oldNo, NewNo: newNo})
			oldNo++
			newNo++
			oldLeft--
			newLeft--
		case Removed:
			h.Lines = append(h.Lines, Line{Kind: Removed, Text: l[1:], OldNo: oldNo})
			oldNo++
			oldLeft--
		case Added:
			h.Lines = append(h.Lines, Line{Kind: Added, Text: l[1:], NewNo: newNo})
			newNo++
			newLeft--
		default:
			return Hunk{}, 0, fmt.Errorf("line %d: unexpected %q inside a hunk", j+1, l)
		}
	}
	if oldLeft != 0 || newLeft != 0 {
		return Hunk{}, 0, fmt.Errorf("line %d: hunk %q is truncated", i+1, lines[i])
	}
	for j < len(lines) && strings.HasPrefix(lines[j], `\`) {
		h.markNoNewline()
		j++
	}
	return h, j, nil
}

// markNoNewline records a "\ No newline at end of file" marker: it follows
// the line it concerns, whose kind says which side ends there.
func (h *Hunk) markNoNewline() {
	if len(h.Lines) == 0 {
		return
	}
	switch h.Lines[len(h.Lines)-1].Kind {
	case Context:
		h.OldNoNewline, h.NewNoNewline = true, true
	case Removed:
		h.OldNoNewline = true
	case Added:
		h.NewNoNewline = true
	}
}

// gitHeaderPaths splits "diff --git a/x b/x". Paths with spaces are split
// at the " b/" that makes both halves equal when possible.
func gitHeaderPaths(line string) (string, string, bool) {
	rest := strings.TrimRight(strings.TrimPrefix(line, "diff --git "), "\r")
	if !strings.HasPrefix(rest, "a/") {
		return "", "", false
	}
	best := -1
	for i := 0; ; {
		j := strings.Index(rest[i:], " b/")
		if j < 0 {
			break
		}
		k := i + j
		if rest[2:k] == rest[k+3:] {
			return rest[2:k], rest[k+3:], true
		}
		best = k
		i = k + 1
	}
	if best < 0 {
		return "", "", false
	}
	return rest[2:best], rest[best+3:], true
}

func headerPath(s, prefix string) string {
	// A tab separates an optional timestamp.
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if s == DevNull {
		return DevNull
	}
	if unq, err := strconv.Unquote(s); err == nil && strings.HasPrefix(s, `"`) {
		s = unq
	}
	return strings.TrimPrefix(s, prefix)
}

// ApplyError reports a hunk that matches nowhere in the file.
type ApplyError struct {
	Hunk int // 1-based
	Line int // where the hunk expected to apply
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("hunk #%d (at line %d) does not apply", e.Hunk, e.Line)
}

// Apply applies the hunks of fp to old (the file's lines, without line
// terminators) and returns the new lines and, per hunk, the offset between
// where it applied and where its header said. Like GNU patch without fuzz,
// a hunk is searched for near its expected place, carrying the previous
// hunk's offset forward.
func Apply(old []string, fp FilePatch) (newLines []string, offsets []int, err error) {
	offsets = make([]int, len(fp.Hunks))
	out := make([]string, 0, len(old)+8)
	pos := 0 // next unconsumed index in old
	carried := 0
	for hi, h := range fp.Hunks {
		var want []string
		for _, l := range h.Lines {
			if l.Kind != Added {
				want = append(want, l.Text)
			}
		}
		expected := h.OldStart - 1
		if h.OldLines == 0 {
			expected = h.OldStart // insertion after line OldStart
		}
		at, ok := locate(old, want, expected+carried, pos)
		if !ok {
			return nil, nil, &ApplyError{Hunk: hi + 1, Line: h.OldStart}
		}
		offsets[hi] = at - expected
		carried = offsets[hi]
		out = append(out, old[pos:at]...)
		for _, l := range h.Lines {
			if l.Kind != Removed {
				out = append(out, l.Text)
			}
		}
		pos = at + len(want)
	}
	out = append(out, old[pos:]...)
	return out, offsets, nil
}

// locate finds want in old at or after min, trying start first and then
// alternately earlier and later positions.
func locate(old, want []string, start, min int) (int, bool) {
	matches := func(at int) bool {
		if at < min || at+len(want) > len(old) {
			return false
		}
		for i, w := range want {
			if old[at+i] != w {
				return false
			}
		}
		return true
	}
	for d := 0; d <= len(old); d++ {
		if matches(start - d) {
			return start - d, true
		}
		if d > 0 && matches(start+d) {
			return start + d, true
		}
	}
	return 0, false
}

// ApplyBytes applies fp to a file's content byte for byte, as git apply
// does: lines keep whatever they end with besides "\n" (a "\r" stays), and
// the result ends without a newline exactly when the patch says its new
// side does, or when the old content did and no hunk reached its end.
func ApplyBytes(old []byte, fp FilePatch) ([]byte, error) {
	oldLines := SplitLines(string(old))
	newLines, offsets, err := Apply(oldLines, fp)
	if err != nil {
		return nil, err
	}
	if len(newLines) == 0 {
		return []byte{}, nil
	}
	noNewline := len(old) > 0 && old[len(old)-1] != '\n'
	if n := len(fp.Hunks); n > 0 {
		last := fp.Hunks[n-1]
		oldEnd := last.OldStart - 1 + offsets[n-1] + last.OldLines
		if last.OldLines == 0 {
			oldEnd = last.OldStart + offsets[n-1]
		}
		if oldEnd >= len(oldLines) { // the last hunk reaches the end of the file: its new side decides
			noNewline = last.NewNoNewline
		}
	}
	out := strings.Join(newLines, "\n")
	if !noNewline {
		out += "\n"
	}
	return []byte(out), nil
}

// SplitLines splits file content into lines without terminators; a final
// newline does not add an empty line.
func SplitLines(content string) []string {
	if content == "" {
		return nil
	}
	content = strings.TrimSuffix(content, "\n")
	return strings.Split(content, "\n")
}

// Reverse turns a unified diff in git format around: the patch that undoes
// it, as git diff writes it with its two sides swapped (SWE-smith's rows
// carry the patch that introduces a bug; the fix to locate is its
// reverse). Within each run of changed lines the removed lines come first,
// as git writes them; a "\ No newline at end of file" marker stays with its
// line.
func Reverse(patch string) string {
	lines := strings.SplitAfter(patch, "\n")
	var out strings.Builder
	for i := 0; i < len(lines); {
		l := lines[i]
		body := strings.TrimRight(l, "\n")
		eol := l[len(body):]
		switch {
		case strings.HasPrefix(body, "diff --git "):
			if a, b, ok := gitHeaderPaths(body); ok {
				out.WriteString("diff --git a/" + b + " b/" + a + eol)
			} else {
				out.WriteString(l)
			}
		case strings.HasPrefix(body, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			next := strings.TrimRight(lines[i+1], "\n")
			out.WriteString("--- " + swapSide(next[4:], "b/", "a/") + eol)
			out.WriteString("+++ " + swapSide(body[4:], "a/", "b/") + lines[i+1][len(next):])
			i += 2
			continue
		case strings.HasPrefix(body, "@@ "):
			out.WriteString(reverseHunkHeader(body) + eol)
			i++
			n := i
			for n < len(lines) && isHunkLine(lines[n]) {
				n++
			}
			writeReversedHunk(&out, lines[i:n])
			i = n
			continue
		default:
			if first, second, ok := swappedPair(body, lines, i); ok {
				out.WriteString(first + eol)
				out.WriteString(second + lines[i+1][len(strings.TrimRight(lines[i+1], "\n")):])
				i += 2
				continue
			}
			out.WriteString(reverseExtendedHeader(body) + eol)
		}
		i++
	}
	return out.String()
}

// headerPairs are git's extended header lines that come in pairs, the old
// side first.
var headerPairs = [][2]string{{"old mode ", "new mode "}, {"rename from ", "rename to "}, {"copy from ", "copy to "}}

// swappedPair turns "rename from X" + "rename to Y" (at lines[i]) into
// "rename from Y" + "rename to X", and so for modes and copies.
func swappedPair(body string, lines []string, i int) (string, string, bool) {
	if i+1 >= len(lines) {
		return "", "", false
	}
	next := strings.TrimRight(lines[i+1], "\n")
	for _, p := range headerPairs {
		a, okA := strings.CutPrefix(body, p[0])
		b, okB := strings.CutPrefix(next, p[1])
		if okA && okB {
			return p[0] + b, p[1] + a, true
		}
	}
	return "", "", false
}

// isHunkLine says whether l belongs to a hunk's body.
func isHunkLine(l string) bool {
	return l != "" && (l[0] == ' ' || l[0] == '+' || l[0] == '-' || l[0] == '\\' || l == "\n")
}

// writeReversedHunk writes a hunk's body with its sides swapped: each run
// of changed lines becomes its added lines (now removed) followed by its
// removed lines (now added), each with its marker.
func writeReversedHunk(out *strings.Builder, body []string) {
	var removed, added []string // of the reversed hunk
	flush := func() {
		for _, l := range removed {
			out.WriteString(l)
		}
		for _, l := range added {
			out.WriteString(l)
		}
		removed, added = nil, nil
	}
	last := &removed
	for _, l := range body {
		switch l[0] {
		case '+':
			removed = append(removed, "-"+l[1:])
			last = &removed
		case '-':
			added = append(added, "+"+l[1:])
			last = &added
		case '\\':
			if len(*last) > 0 {
				*last = append(*last, l)
			} else {
				out.WriteString(l)
			}
		default: // context
			flush()
			out.WriteString(l)
			removed, added = nil, nil
			last = &removed
		}
	}
	flush()
}

// reverseHunkHeader swaps "@@ -a,b +c,d @@" into "@@ -c,d +a,b @@".
func reverseHunkHeader(h string) string {
	m := hunkHeader.FindStringSubmatchIndex(h)
	if m == nil {
		return h
	}
	side := func(start, count int) string { // "a" or "a,b", as written
		if m[count] < 0 {
			return h[m[start]:m[start+1]]
		}
		return h[m[start]:m[start+1]] + "," + h[m[count]:m[count+1]]
	}
	return "@@ -" + side(6, 8) + " +" + side(2, 4) + " @@" + h[m[1]:]
}

// reverseExtendedHeader swaps the sides of a lone extended header line
// (a file's creation or deletion, the index line); others are kept.
func reverseExtendedHeader(l string) string {
	for _, p := range [][2]string{{"new file mode ", "deleted file mode "}} {
		if rest, ok := strings.CutPrefix(l, p[0]); ok {
			return p[1] + rest
		}
		if rest, ok := strings.CutPrefix(l, p[1]); ok {
			return p[0] + rest
		}
	}
	if rest, ok := strings.CutPrefix(l, "index "); ok {
		ids, mode, _ := strings.Cut(rest, " ")
		if a, b, ok := strings.Cut(ids, ".."); ok {
			if mode != "" {
				mode = " " + mode
			}
			return "index " + b + ".." + a + mode
		}
	}
	return l
}

// swapSide turns a "--- a/x" or "+++ b/x" path into the other side's.
func swapSide(p, from, to string) string {
	if rest, ok := strings.CutPrefix(p, from); ok {
		return to + rest
	}
	return p // /dev/null, or a path without a prefix
}

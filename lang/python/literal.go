package python

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	ts "github.com/tree-sitter/go-tree-sitter"
)

// decodeStringLiteral returns the value of a Python str literal as written
// in source (prefix, quotes and all). ok is false for bytes and f-strings,
// which Python never treats as docstrings.
func decodeStringLiteral(lit string) (value string, ok bool) {
	i := 0
	raw := false
	for i < len(lit) && strings.IndexByte("rRuUbBfFtT", lit[i]) >= 0 {
		switch lit[i] {
		case 'r', 'R':
			raw = true
		case 'b', 'B', 'f', 'F', 't', 'T':
			return "", false
		}
		i++
	}
	body := lit[i:]
	var quote string
	switch {
	case strings.HasPrefix(body, `"""`), strings.HasPrefix(body, `'''`):
		quote = body[:3]
	case strings.HasPrefix(body, `"`), strings.HasPrefix(body, `'`):
		quote = body[:1]
	default:
		return "", false
	}
	if len(body) < 2*len(quote) || !strings.HasSuffix(body, quote) {
		return "", false
	}
	body = body[len(quote) : len(body)-len(quote)]
	// The tokenizer normalises line endings before the parser sees them.
	body = strings.ReplaceAll(body, "\r\n", "\n")
	body = strings.ReplaceAll(body, "\r", "\n")
	if raw || !strings.Contains(body, `\`) {
		return body, true
	}
	return unescape(body), true
}

// unescape applies Python's str escape sequences; unknown escapes keep their
// backslash, as Python does.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
			// line continuation: both characters vanish
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+width <= len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
					b.WriteRune(rune(v))
					i += width
					continue
				}
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		case 'N':
			// \N{NAME}: the name table is not worth carrying; one rune
			// stands in, which keeps line counts right.
			if end := strings.IndexByte(s[i:], '}'); end > 0 && s[i+1] == '{' {
				b.WriteRune(utf8.RuneError)
				i += end
				continue
			}
			b.WriteString(`\N`)
		default:
			if e >= '0' && e <= '7' {
				j := i
				for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
					j++
				}
				v, _ := strconv.ParseUint(s[i:j], 8, 32)
				b.WriteRune(rune(v))
				i = j - 1
				continue
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String()
}

// CleanDocstring applies Python's inspect.cleandoc: tabs expanded, the
// common indentation of all lines but the first removed, the first line's
// leading whitespace removed, and leading and trailing blank lines dropped.
func CleanDocstring(doc string) string {
	lines := strings.Split(expandTabs(doc), "\n")
	margin := -1
	for _, l := range lines[1:] {
		content := len(strings.TrimLeft(l, " \t\n\r\v\f"))
		if content == 0 {
			continue
		}
		indent := len(l) - content
		if margin < 0 || indent < margin {
			margin = indent
		}
	}
	if len(lines) > 0 {
		lines[0] = strings.TrimLeft(lines[0], " \t\n\r\v\f")
	}
	if margin >= 0 {
		for i := 1; i < len(lines); i++ {
			if len(lines[i]) >= margin {
				lines[i] = lines[i][margin:]
			} else {
				lines[i] = ""
			}
		}
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n")
}

func expandTabs(s string) string {
	if !strings.Contains(s, "\t") {
		return s
	}
	var b strings.Builder
	col := 0
	for _, r := range s {
		switch r {
		case '\t':
			n := 8 - col%8
			b.WriteString(strings.Repeat(" ", n))
			col += n
		case '\n', '\r':
			b.WriteRune(r)
			col = 0
		default:
			b.WriteRune(r)
			col++
		}
	}
	return b.String()
}

// SplitLines splits like Python's str.splitlines: every Unicode line
// boundary ends a line and a trailing boundary adds no empty line.
func SplitLines(s string) []string {
	var lines []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		end := i + size
		switch r {
		case '\r':
			if end < len(s) && s[end] == '\n' {
				end++
			}
			fallthrough
		case '\n', '\v', '\f', '\x1c', '\x1d', '\x1e', '\u0085', '\u2028', '\u2029':
			lines = append(lines, s[start:i])
			start = end
		}
		i = end
	}
	if start < len(s) {
		lines = append(lines, s[start:])
	}
	return lines
}

// mayHaveBadEscape is a cheap pre-check: only sources containing \u, \U
// or \N can hold an escape that Python 3 rejects in a str literal.
func mayHaveBadEscape(src []byte) bool {
	return bytes.Contains(src, []byte(`\u`)) || bytes.Contains(src, []byte(`\U`)) || bytes.Contains(src, []byte(`\N`))
}

// hasBadEscape reports whether any non-raw, non-bytes string literal holds
// a truncated \uXXXX, \UXXXXXXXX or \N{...} escape: a SyntaxError in
// Python 3 (typical of Python 2 docstrings), which makes the reference
// tools treat the whole file as unparsable.
func (st *parseState) hasBadEscape(root *ts.Node) bool {
	matches := st.p.cursor.Matches(st.p.strQ, root, st.src)
	for m := matches.Next(); m != nil; m = matches.Next() {
		if badEscape(st.text(&m.Captures[0].Node)) {
			return true
		}
	}
	return false
}

func badEscape(lit string) bool {
	i := 0
	for i < len(lit) && strings.IndexByte("rRuUbBfFtT", lit[i]) >= 0 {
		switch lit[i] {
		case 'r', 'R', 'b', 'B':
			return false
		}
		i++
	}
	isHex := func(s string) bool {
		for j := 0; j < len(s); j++ {
			if !strings.ContainsRune("0123456789abcdefABCDEF", rune(s[j])) {
				return false
			}
		}
		return true
	}
	s := lit[i:]
	for j := 0; j < len(s)-1; j++ {
		if s[j] != '\\' {
			continue
		}
		switch s[j+1] {
		case 'u':
			if j+6 > len(s) || !isHex(s[j+2:j+6]) {
				return true
			}
		case 'U':
			if j+10 > len(s) || !isHex(s[j+2:j+10]) {
				return true
			}
			if v, _ := strconv.ParseUint(s[j+2:j+10], 16, 32); v > utf8.MaxRune {
				return true
			}
		case 'N':
			if j+2 >= len(s) || s[j+2] != '{' || !strings.Contains(s[j+2:], "}") {
				return true
			}
		}
		j++ // skip the escaped character
	}
	return false
}

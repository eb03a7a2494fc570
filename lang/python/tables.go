package python

// Large literal tables — tuples and lists of thousands of numbers, such as
// the character-frequency tables vendored with requests — cost tree-sitter
// far more per byte than code (every number is a node of one huge
// repetition, balanced, queried and freed), and hold nothing the extractor
// records: no definitions, imports or calls. blankNumberTables replaces
// the inside of such a bracket with spaces (newlines kept), so every byte
// offset, line and column of the file stays where it was and the
// structure extracted is the same.

// minTableNumbers is the smallest table worth blanking.
const minTableNumbers = 32

// blankNumberTables returns src with the inside of every bracketed,
// well-formed list of at least minTableNumbers numbers blanked, or src
// itself when there is none. Brackets that index ("x[1, 2]") are left
// alone: an empty subscript would not parse.
func blankNumberTables(src []byte) []byte {
	out := src
	for i := 0; i < len(src); {
		switch c := src[i]; {
		case c == '#':
			i = skipComment(src, i)
		case c == '"' || c == '\'':
			i = skipString(src, i)
		case c == '(' || c == '[':
			end, numbers := numberTable(src, i)
			if numbers >= minTableNumbers && (c == '(' || !indexes(src, i)) {
				if &out[0] == &src[0] {
					out = append([]byte(nil), src...)
				}
				for j := i + 1; j < end; j++ {
					if out[j] != '\n' && out[j] != '\r' {
						out[j] = ' '
					}
				}
				i = end + 1
				continue
			}
			i++
		default:
			if isIdentByte(c) {
				// Skip whole words so that a string prefix (r"", b'')
				// or a name never reads as the start of something else.
				for i < len(src) && isIdentByte(src[i]) {
					i++
				}
				if i < len(src) && (src[i] == '"' || src[i] == '\'') {
					i = skipString(src, i)
				}
				continue
			}
			i++
		}
	}
	return out
}

// numberTable reads a comma-separated list of numbers (each with an
// optional sign; comments and line breaks allowed) from the bracket at
// open to its closing bracket. It returns the closing bracket's index and
// the count of numbers, or 0 numbers when anything else is there.
func numberTable(src []byte, open int) (end, numbers int) {
	want := byte(')')
	if src[open] == '[' {
		want = ']'
	}
	i := open + 1
	expectNumber := true
	for {
		i = skipSpace(src, i)
		if i >= len(src) {
			return 0, 0
		}
		c := src[i]
		switch {
		case c == want:
			return i, numbers
		case c == ',' && !expectNumber:
			expectNumber = true
			i++
		case expectNumber && (c == '-' || c == '+' || c >= '0' && c <= '9' || c == '.'):
			if c == '-' || c == '+' {
				i = skipSpace(src, i+1)
			}
			n := numberEnd(src, i)
			if n == i {
				return 0, 0
			}
			i = n
			numbers++
			expectNumber = false
		default:
			return 0, 0
		}
	}
}

// numberEnd returns the end of the Python number literal at i (i itself
// when there is none, or when a name is glued to it).
func numberEnd(src []byte, i int) int {
	start := i
	digits := func(ok func(byte) bool) {
		for i < len(src) && (ok(src[i]) || src[i] == '_') {
			i++
		}
	}
	isDec := func(c byte) bool { return c >= '0' && c <= '9' }
	isHex := func(c byte) bool { return isDec(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
	if i+1 < len(src) && src[i] == '0' && (src[i+1]|0x20 == 'x' || src[i+1]|0x20 == 'o' || src[i+1]|0x20 == 'b') {
		i += 2
		digits(isHex)
	} else {
		digits(isDec)
		if i < len(src) && src[i] == '.' {
			i++
			digits(isDec)
		}
		if i == start || i == start+1 && src[start] == '.' {
			return start
		}
		if i < len(src) && src[i]|0x20 == 'e' {
			j := i + 1
			if j < len(src) && (src[j] == '+' || src[j] == '-') {
				j++
			}
			if j < len(src) && isDec(src[j]) {
				i = j
				digits(isDec)
			}
		}
	}
	if i < len(src) && (src[i]|0x20 == 'j' || src[i]|0x20 == 'l') {
		i++
	}
	if i < len(src) && isIdentByte(src[i]) {
		return start
	}
	return i
}

// indexes reports whether the bracket at i follows an expression (a name,
// a closing bracket or a string), which makes it a subscript.
func indexes(src []byte, i int) bool {
	// Inside brackets a subscript may follow its name on the next line:
	// look back over line breaks too (a comment there reads as text, and
	// keeps the bracket, which is the safe side).
	for i--; i >= 0 && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r'); i-- {
	}
	if i < 0 {
		return false
	}
	c := src[i]
	return isIdentByte(c) || c == ')' || c == ']' || c == '}' || c == '"' || c == '\'' || c >= 0x80
}

// skipSpace skips blanks, line breaks, line continuations and comments.
func skipSpace(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r', '\f':
			i++
		case '\\': // a line continuation, and nothing else
			if i+1 < len(src) && (src[i+1] == '\n' || src[i+1] == '\r') {
				i += 2
				continue
			}
			return i
		case '#':
			i = skipComment(src, i)
		default:
			return i
		}
	}
	return i
}

func skipComment(src []byte, i int) int {
	for i < len(src) && src[i] != '\n' {
		i++
	}
	return i
}

// skipString returns the index after the string literal whose quote is at
// i (triple-quoted or not; escapes honoured; an unterminated one-line
// string ends at its line).
func skipString(src []byte, i int) int {
	q := src[i]
	if i+2 < len(src) && src[i+1] == q && src[i+2] == q {
		for j := i + 3; j+2 < len(src); j++ {
			switch {
			case src[j] == '\\':
				j++
			case src[j] == q && src[j+1] == q && src[j+2] == q:
				return j + 3
			}
		}
		return len(src)
	}
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case q:
			return j + 1
		case '\n':
			return j
		}
	}
	return len(src)
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

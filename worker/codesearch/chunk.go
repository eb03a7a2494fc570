package codesearch

import (
	"strings"
	"unicode/utf8"

	"github.com/a2farm/a2farm/lang"
)

// Chunk sizes in (approximate) tokens, and the per-file chunk limit, as
// the reference's code splitter uses them.
const (
	ChunkMinTokens    = 100
	ChunkTargetTokens = 500
	ChunkMaxTokens    = 2000
	MaxChunksPerFile  = 200
)

// Chunk is a run of lines of one file, aligned to definitions.
type Chunk struct {
	File      string
	StartLine int
	EndLine   int
	// SpanIDs name what the chunk covers: qualified names of classes and
	// functions, or "imports", "docstring", "comments" for module-level
	// code of those kinds (other module-level code is named by its first
	// assigned name, or "code").
	SpanIDs []string
	Tokens  int
}

// approxTokens estimates a BPE token count: words and punctuation marks,
// the matches of `\w+|[^\w\s]` (ASCII classes, as RE2 has them) counted
// by hand — the regular expression was a third of chunking's time.
func approxTokens(s string) int {
	n := 0
	inWord := false
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case isWordByte(c):
				if !inWord {
					n++
				}
				inWord = true
				continue
			case c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f':
				n++ // one punctuation mark
			}
			inWord = false
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:]) // an invalid byte is one match too
		i += size
		n++
		inWord = false
	}
	return n
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// unit is an indivisible (unless oversized) piece of a file.
type unit struct {
	start, end int // lines, 1-based inclusive
	spans      []string
}

// ChunkFile splits one file, parsed as language l, into chunks.
func ChunkFile(l lang.Language, file string, content []byte, pf *lang.File) []Chunk {
	lines := strings.Split(string(content), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return nil
	}
	units := fileUnits(l, lines, pf)
	tokensOf := func(start, end int) int { return approxTokens(strings.Join(lines[start-1:end], "\n")) }

	var chunks []Chunk
	var cur *Chunk
	flush := func() {
		if cur != nil {
			chunks = append(chunks, *cur)
			cur = nil
		}
	}
	for _, u := range units {
		n := tokensOf(u.start, u.end)
		if n > ChunkMaxTokens {
			flush()
			chunks = append(chunks, splitLines(file, lines, u, tokensOf)...)
			continue
		}
		if cur != nil && (cur.Tokens+n > ChunkMaxTokens || (cur.Tokens+n > ChunkTargetTokens && cur.Tokens >= ChunkMinTokens)) {
			flush()
		}
		if cur == nil {
			cur = &Chunk{File: file, StartLine: u.start}
		}
		cur.EndLine = u.end
		cur.Tokens += n
		cur.SpanIDs = appendNew(cur.SpanIDs, u.spans...)
	}
	flush()
	// A small tail joins the chunk before it when that stays within max.
	if k := len(chunks); k >= 2 && chunks[k-1].Tokens < ChunkMinTokens && chunks[k-2].Tokens+chunks[k-1].Tokens <= ChunkMaxTokens &&
		chunks[k-2].EndLine < chunks[k-1].StartLine {
		chunks[k-2].EndLine = chunks[k-1].EndLine
		chunks[k-2].Tokens += chunks[k-1].Tokens
		chunks[k-2].SpanIDs = appendNew(chunks[k-2].SpanIDs, chunks[k-1].SpanIDs...)
		chunks = chunks[:k-1]
	}
	if len(chunks) > MaxChunksPerFile {
		chunks = chunks[:MaxChunksPerFile]
	}
	return chunks
}

// splitLines cuts an oversized unit into windows of at most max tokens.
func splitLines(file string, lines []string, u unit, tokensOf func(int, int) int) []Chunk {
	var out []Chunk
	start := u.start
	for start <= u.end {
		end := start
		n := tokensOf(start, start)
		for end < u.end {
			next := tokensOf(end+1, end+1)
			if n+next > ChunkMaxTokens {
				break
			}
			end++
			n += next
		}
		out = append(out, Chunk{File: file, StartLine: start, EndLine: end, SpanIDs: append([]string(nil), u.spans...), Tokens: n})
		start = end + 1
	}
	return out
}

// fileUnits turns a file into units: each top-level definition (with its
// decorators; a class too big for one chunk is split into its header and
// its members) and each module-level statement group between them.
func fileUnits(l lang.Language, lines []string, pf *lang.File) []unit {
	var units []unit
	covered := 0 // last line assigned to a unit
	moduleGap := func(upTo int) {
		if upTo <= covered {
			return
		}
		if mu := moduleUnits(l, lines, pf, covered+1, upTo); len(mu) > 0 {
			units = append(units, mu...)
		} else if len(units) > 0 {
			units[len(units)-1].end = upTo // blank lines join the unit before them
		} else {
			return // leading blank lines join the next unit
		}
		covered = upTo
	}
	if pf != nil && !pf.HasErrors {
		for _, d := range pf.Defs {
			start := d.FirstLine()
			moduleGap(start - 1)
			if start <= covered {
				continue
			}
			units = append(units, defUnits(lines, d, start)...)
			covered = max(covered, d.Span.End)
		}
	}
	moduleGap(len(lines))
	return units
}

// defUnits is one unit for a definition, or, for a class larger than a
// chunk, its header plus one unit per member.
func defUnits(lines []string, d *lang.Def, start int) []unit {
	whole := unit{start: start, end: d.Span.End, spans: defSpans(d)}
	if d.Kind != lang.KindClass || approxTokens(strings.Join(lines[start-1:d.Span.End], "\n")) <= ChunkMaxTokens {
		return []unit{whole}
	}
	var units []unit
	next := start
	for _, m := range d.Children {
		ms := m.FirstLine()
		if ms > next {
			units = append(units, unit{start: next, end: ms - 1, spans: []string{d.QualName}})
		}
		units = append(units, unit{start: ms, end: m.Span.End, spans: defSpans(m)})
		next = m.Span.End + 1
	}
	if next <= d.Span.End {
		units = append(units, unit{start: next, end: d.Span.End, spans: []string{d.QualName}})
	}
	return units
}

// defSpans names a definition and every definition nested in it.
func defSpans(d *lang.Def) []string {
	spans := []string{d.QualName}
	for _, c := range d.Children {
		spans = append(spans, defSpans(c)...)
	}
	return spans
}

// moduleUnits groups module-level lines [from, to] into one unit with span
// ids describing what they hold.
func moduleUnits(fl lang.Language, lines []string, pf *lang.File, from, to int) []unit {
	var spans []string
	inSpan := func(line int, sp lang.Span) bool { return sp.Contains(line) }
	hasCode := false
	for l := from; l <= to; l++ {
		text := strings.TrimSpace(lines[l-1])
		switch {
		case text == "":
			continue
		case fl.IsComment(text):
			spans = appendNew(spans, "comments")
			hasCode = true
			continue
		}
		hasCode = true
		kind := "code"
		if pf != nil {
			if pf.Docstring != nil && inSpan(l, pf.Docstring.Span) {
				kind = "docstring"
			}
			for _, imp := range pf.Imports {
				if imp.Scope == "" && inSpan(l, imp.Span) {
					kind = "imports"
					break
				}
			}
			if kind == "code" {
				for _, a := range pf.Assignments {
					if inSpan(l, a.Span) && len(a.Targets) > 0 {
						kind = a.Targets[0]
						break
					}
				}
			}
		}
		spans = appendNew(spans, kind)
	}
	if !hasCode {
		return nil
	}
	return []unit{{start: from, end: to, spans: spans}}
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		found := false
		for _, x := range list {
			if x == it {
				found = true
				break
			}
		}
		if !found {
			list = append(list, it)
		}
	}
	return list
}

package agent

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/codegraph"
)

var (
	fencedBlock = regexp.MustCompile("(?s)```[A-Za-z0-9_+-]*\\n(.*?)```")
	lineNumber  = regexp.MustCompile(`\d+(?:\s*-\s*\d+)?`)
	recorded    = []string{"function:", "class:", "method:", "variable:", "variables:", "line:", "lines:"}
)

// pathSyntax finds a language's source paths in free text, as the
// reference's answer parsing and fallbacks do for .py paths.
type pathSyntax struct {
	lang *lang.Set
	// token is a path word; line a path within an answer line (spaces
	// allowed); inText a path with a folder; fenced a fenced block that
	// names one.
	token, line, inText, fenced *regexp.Regexp
}

func newPathSyntax(l *lang.Set) *pathSyntax {
	// A path's characters: word characters, and '$', which Java's
	// generated and internal classes have ($Gson$Types.java).
	ext := l.ExtensionPattern()
	return &pathSyntax{
		lang:   l,
		token:  regexp.MustCompile(`[\w$/-]+` + ext),
		line:   regexp.MustCompile(`[\w$ ./-]+` + ext),
		inText: regexp.MustCompile(`[\w$]+/[\w$./-]*` + ext),
		fenced: regexp.MustCompile("(?s)```[^\\n]*\\n.*?[\\w$]+/[\\w$./-]*" + ext + ".*?```"),
	}
}

// ParseAnswer turns the agent's raw answer into predictions, as the
// reference does (§A.6.1) with its two bugs fixed: line numbers map only to
// functions of the named file, and root-level files (setup.py) can be
// named.
func ParseAnswer(raw string, g *codegraph.Graph) schema.Locations {
	return parseAnswer(raw, g, newPathSyntax(g.Languages()))
}

func parseAnswer(raw string, g *codegraph.Graph, syntax *pathSyntax) schema.Locations {
	p := answerParser{g: g, files: map[string]bool{}, tops: map[string]bool{}}
	for _, n := range g.Nodes {
		if n.Type == codegraph.File && !codegraph.IsTestID(n.ID) {
			p.files[n.ID] = true
			top, _, _ := strings.Cut(n.ID, "/")
			p.tops[top] = true
		}
	}
	text := syntax.answerText(raw)
	var files, lines []string
	current := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.Trim(strings.TrimSpace(l), ": \t")
		if syntax.lang.HasExtension(l) {
			current = p.resolve(syntax.line.FindString(l))
			if current != "" && !slices.Contains(files, current) {
				files = append(files, current)
			}
			continue
		}
		for _, prefix := range recorded {
			if strings.HasPrefix(l, prefix) {
				if rec := current + ":" + l; !slices.Contains(lines, rec) {
					lines = append(lines, rec)
				}
				break
			}
		}
	}
	if len(files) == 0 {
		for _, m := range syntax.token.FindAllString(raw, -1) {
			if f := p.resolve(m); f != "" && !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	entities := p.entities(lines)
	var loc schema.Locations
	loc.Files = files
	for _, e := range entities {
		loc.Entities = append(loc.Entities, e)
		file, qual, _ := strings.Cut(e, ":")
		module := e
		if i := strings.LastIndexByte(qual, '.'); i >= 0 {
			module = ""
			if parent := e[:len(file)+1+i]; p.has(parent) {
				module = parent
			}
		}
		if mn, ok := p.g.Languages().Reader(file).(lang.ModuleNamer); ok {
			if m := file + ":" + mn.ModuleOf(qual); p.has(m) {
				module = m
			}
		}
		if module != "" && !slices.Contains(loc.Modules, module) {
			loc.Modules = append(loc.Modules, module)
		}
	}
	return loc
}

// answerText picks what to parse: the last fenced block that names a
// source file and is not code, else the last block, else the whole text.
func (ps *pathSyntax) answerText(raw string) string {
	blocks := fencedBlock.FindAllStringSubmatch(raw, -1)
	for i := len(blocks) - 1; i >= 0; i-- {
		content := blocks[i][1]
		trimmed := strings.TrimSpace(content)
		isCode := false
		for _, kw := range []string{"def ", "import ", "class ", "from "} {
			if strings.HasPrefix(trimmed, kw) {
				isCode = true
			}
		}
		if ps.token.MatchString(content) && !isCode {
			return content
		}
	}
	if len(blocks) > 0 {
		return blocks[len(blocks)-1][1]
	}
	return strings.Trim(raw, "` \n")
}

type answerParser struct {
	g     *codegraph.Graph
	files map[string]bool // non-test files
	tops  map[string]bool // their first path components
}

func (p *answerParser) has(id string) bool {
	_, ok := p.g.HasNode(id)
	return ok
}

func (p *answerParser) isFunction(id string) bool {
	n, ok := p.g.HasNode(id)
	return ok && p.g.Node(n).Type == codegraph.Function
}

// resolve maps a path-like match to a repository file: cut to start at the
// earliest "<top folder>/" (so "1. pkg/x.py" and "/abs/repo/pkg/x.py"
// resolve), or accept a root-level file named on its own.
func (p *answerParser) resolve(m string) string {
	if m == "" {
		return ""
	}
	best := -1
	for top := range p.tops {
		if i := strings.Index(m, top+"/"); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if best >= 0 && p.files[m[best:]] {
		return m[best:]
	}
	fields := strings.Fields(m)
	if len(fields) > 0 {
		if last := strings.TrimLeft(fields[len(fields)-1], "./"); p.files[last] {
			return last
		}
	}
	return ""
}

// entities resolves the recorded "file:kind: name" lines to function ids,
// ranked by how often they were named.
func (p *answerParser) entities(records []string) []string {
	counts := map[string]int{}
	var order []string
	add := func(id string) {
		if counts[id] == 0 {
			order = append(order, id)
		}
		counts[id]++
	}
	lastFile, class := "", ""
	for _, rec := range records {
		file, line, _ := strings.Cut(rec, ":")
		if file == "" {
			continue // named before any valid file
		}
		if file != lastFile {
			lastFile, class = file, ""
		}
		kind, rest, _ := strings.Cut(line, ":")
		switch {
		case kind == "line" || kind == "lines":
			for _, id := range p.linesToFunctions(file, rest) {
				add(id)
			}
		case kind == "class" && !strings.Contains(rest, "."):
			if name := strings.TrimSpace(rest); p.has(file + ":" + name) {
				class = name
			}
		case strings.HasPrefix(rest, " ") && (kind == "function" || kind == "method") || strings.Contains(line, "."):
			if id := p.lookupName(file, rest, class); id != "" {
				add(id)
			}
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return counts[b] - counts[a] })
	var out []string
	for _, id := range order {
		if n, ok := p.g.HasNode(id); ok && p.g.Node(n).Type == codegraph.Function {
			out = append(out, id)
		}
	}
	return out
}

// lookupName resolves "Class.method" / "func" named in file.
func (p *answerParser) lookupName(file, text, class string) string {
	fields := strings.Fields(strings.NewReplacer("(", "", ")", "").Replace(strings.TrimSpace(text)))
	if len(fields) == 0 {
		return ""
	}
	token := fields[0]
	// "C.m.inner" names the method C.m, as the reference reads it; a
	// nested type's method ("Outer.Inner.m") is found whole.
	if parts := strings.Split(token, "."); len(parts) >= 2 {
		if id := file + ":" + parts[0] + "." + parts[1]; p.isFunction(id) {
			return id
		}
	}
	if id := file + ":" + token; p.has(id) {
		return id
	}
	if class != "" {
		if id := file + ":" + class + "." + token; p.has(id) {
			return id
		}
		return ""
	}
	var match string
	for _, n := range p.g.Nodes {
		if codegraph.IsTestID(n.ID) || !strings.HasPrefix(n.ID, file) {
			continue
		}
		if i := strings.LastIndexAny(n.ID, ".:"); i >= 0 && n.ID[i+1:] == token {
			if match != "" {
				return "" // ambiguous
			}
			match = n.ID
		}
	}
	return match
}

// linesToFunctions maps line numbers ("12, 30-32") of file to the
// innermost functions of that file holding them.
func (p *answerParser) linesToFunctions(file, text string) []string {
	fn, ok := p.g.HasNode(file)
	if !ok {
		return nil
	}
	fileLines := max(p.g.Node(fn).EndLine, 1)
	var nums []int
	for _, m := range lineNumber.FindAllString(text, -1) {
		lo, hi, isRange := strings.Cut(m, "-")
		a, _ := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		if isRange {
			b, _ = strconv.Atoi(strings.TrimSpace(hi))
		}
		for l := min(a, b); l <= max(a, b) && l-min(a, b) < 10000; l++ {
			nums = append(nums, min(max(l, 1), fileLines))
		}
	}
	slices.Sort(nums)
	nums = slices.Compact(nums)
	var funcs []codegraph.NodeID
	for i, n := range p.g.Nodes {
		if n.Type == codegraph.Function && strings.HasPrefix(n.ID, file+":") {
			funcs = append(funcs, codegraph.NodeID(i))
		}
	}
	var out []string
	prevStart, prevEnd := 0, -1
	for _, line := range nums {
		if line >= prevStart && line <= prevEnd {
			continue
		}
		lo, hi := 1, fileLines
		found := codegraph.NodeID(-1)
		for _, f := range funcs {
			s, e := p.g.Lines(f)
			if s >= lo && e <= hi && s <= line && line <= e {
				found, lo, hi = f, s, e
			}
		}
		if found >= 0 {
			out = append(out, p.g.Node(found).ID)
			prevStart, prevEnd = lo, hi
		}
	}
	return out
}

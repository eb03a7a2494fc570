package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
)

// search_code_snippets limits.
const (
	maxPatternLen   = 256
	lineContext     = 20 // lines around a line number outside any entity
	bm25TopK        = 10
	fuzzyTopK       = 3
	maxPreviewLines = 100
)

// searchTool's default file pattern is every source file of the language
// ("**/*.py").
func searchTool(l *lang.Set) *Tool {
	defaultFilePattern := l.SourceGlob()
	return &Tool{
		Name: SearchCodeSnippets,
		Description: `Searches the code for terms or around line numbers.

Each search term may be an entity id (file_path:QualifiedName, or a file path:
its full code is returned), a class, function or file name (matching entities
are shown), or any keywords or code fragment (the best matching code chunks
are shown). With several terms, their combination is searched as well.
line_nums shows the code around those lines of the one file named by
file_path_or_pattern. file_path_or_pattern restricts the search to files
matching a glob (default "` + defaultFilePattern + `") or containing the given text.
Provide search_terms, line_nums, or both.`,
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"search_terms":{"type":"array","items":{"type":"string"},"description":"Names, keywords or code fragments to look for: entity ids, class, function or file names, or free text."},` +
			`"line_nums":{"type":"array","items":{"type":"integer"},"description":"Line numbers to show the code around; file_path_or_pattern must then be one file path."},` +
			`"file_path_or_pattern":{"type":"string","default":` + strconv.Quote(defaultFilePattern) + `,"description":"A glob or a path fragment limiting which files are searched; with line_nums, the file to read."}` +
			`},"required":[]}`),
		call: func(_ context.Context, s *Set, args json.RawMessage) (Result, error) {
			var a struct {
				SearchTerms *[]string `json:"search_terms"`
				LineNums    *[]int    `json:"line_nums"`
				Pattern     *string   `json:"file_path_or_pattern"`
			}
			if err := decode(args, &a); err != nil {
				return Result{}, err
			}
			q := searchQuery{pattern: defaultFilePattern}
			if a.SearchTerms != nil {
				q.terms = *a.SearchTerms
			}
			if a.LineNums != nil {
				q.lines = *a.LineNums
			}
			if a.Pattern != nil {
				q.pattern = *a.Pattern
			}
			switch {
			case len(q.terms) > MaxListArgs:
				return Result{}, badArgs("`search_terms` has %d entries; at most %d are allowed per call.", len(q.terms), MaxListArgs)
			case len(q.lines) > MaxListArgs:
				return Result{}, badArgs("`line_nums` has %d entries; at most %d are allowed per call.", len(q.lines), MaxListArgs)
			case len(q.pattern) > maxPatternLen:
				return Result{}, badArgs("`file_path_or_pattern` is %d characters long; at most %d are allowed.", len(q.pattern), maxPatternLen)
			case len(q.terms) == 0 && len(q.lines) == 0:
				return Result{}, badArgs("provide `search_terms` or `line_nums` (with a file path in `file_path_or_pattern`).")
			}
			return s.searchCode(q), nil
		},
	}
}

type searchQuery struct {
	terms   []string
	lines   []int
	pattern string
}

// Result formats, best first: merging keeps the best format per entity.
type format int

const (
	formatComplete format = iota
	formatSnippet
	formatPreview
	formatFold
)

// queryResult is one located thing, before formatting.
type queryResult struct {
	format  format
	node    codegraph.NodeID
	hasNode bool
	file    string // code snippets: the file; others: the node's file
	start   int
	end     int
	terms   []int // indexes of the query terms that produced it
	source  string
	desc    string
	message string
}

// searchCode reproduces the reference search_code_snippets: per term an
// exact id, a name lookup, BM25 over node ids (fuzzy as a fallback) and
// BM25 over code chunks, results merged per entity and grouped by the
// terms that produced them.
func (s *Set) searchCode(q searchQuery) Result {
	g := s.idx.Graph
	var out strings.Builder
	include, matched := s.matchFiles(q.pattern)
	if !matched {
		fmt.Fprintf(&out, "No files found for file pattern '%s'. Will search all files.\n...\n", q.pattern)
	}
	var terms []string // the query terms actually searched, by index
	var results []queryResult
	if len(q.terms) > 0 {
		var filtered []string
		for _, t := range q.terms {
			if codegraph.IsTestID(t) {
				fmt.Fprintf(&out, "No results for test files: `%s`. Please do not search for any test files.\n\n", t)
				continue
			}
			filtered = append(filtered, t)
		}
		joint := slices.Clone(filtered)
		if len(filtered) > 1 {
			filtered = append(filtered, strings.Join(filtered, " "))
		}
		for i := range filtered {
			term := strings.Trim(strings.TrimSpace(filtered[i]), ".")
			if term == "" {
				continue
			}
			ti := len(terms)
			terms = append(terms, term)
			found, more := s.searchEntity(term, ti, include)
			results = append(results, found...)
			if more {
				results = append(results, s.searchChunks(term, ti, include)...)
			} else if i != len(filtered)-1 {
				// A term resolved to entities leaves the joint search.
				joint[i] = ""
				var rest []string
				for _, t := range joint {
					if strings.TrimSpace(t) != "" {
						rest = append(rest, t)
					}
				}
				last := strings.Join(rest, " ")
				if slices.Contains(filtered[:len(filtered)-1], last) {
					last = ""
				}
				filtered[len(filtered)-1] = last
			}
		}
	}
	if fileNode, ok := g.HasNode(q.pattern); ok && g.Node(fileNode).Type == codegraph.File && len(q.lines) > 0 {
		parts := make([]string, len(q.lines))
		for i, l := range q.lines {
			parts[i] = strconv.Itoa(l)
		}
		ti := len(terms)
		terms = append(terms, q.pattern+":line "+strings.Join(parts, ", "))
		results = append(results, s.searchLines(fileNode, q.lines, ti, terms[ti])...)
	} else if len(q.lines) > 0 && len(q.terms) == 0 {
		fmt.Fprintf(&out, "`line_nums` needs `file_path_or_pattern` to name one file of the repository; '%s' is not one.\n", q.pattern)
	}

	var sf surfacer
	for _, group := range groupResults(mergeResults(results), len(terms)) {
		quoted := make([]string, len(group.terms))
		for i, t := range group.terms {
			quoted[i] = `"` + terms[t] + `"`
		}
		fmt.Fprintf(&out, "##Searching for term %s...\n### Search Result:\n", strings.Join(quoted, ", "))
		body := s.formatGroup(group.byFormat, &sf)
		if strings.TrimSpace(body) == "" {
			out.WriteString("No locations found.\n\n")
		} else {
			out.WriteString(body + "\n\n")
		}
	}
	obs := strings.TrimSpace(out.String())
	if obs == "" {
		obs = "No locations found: every search term was empty."
	}
	return Result{Observation: Cut(obs, ToolCap, toolCutSuffix), Surfaced: sf.loc}
}

// matchFiles returns the non-test files the pattern selects: a glob (with
// "*" crossing "/") when it has *, ? or [, else a substring match. When
// nothing matches, every file is searched (matched = false).
func (s *Set) matchFiles(pattern string) (map[string]bool, bool) {
	g := s.idx.Graph
	var all []string
	for _, n := range g.Nodes {
		if n.Type == codegraph.File && !codegraph.IsTestID(n.ID) {
			all = append(all, n.ID)
		}
	}
	var match func(string) bool
	if strings.ContainsAny(pattern, "*?[") {
		re, err := globRegexp(pattern)
		if err != nil {
			match = func(string) bool { return false }
		} else {
			match = re.MatchString
		}
	} else {
		match = func(p string) bool { return strings.Contains(p, pattern) }
	}
	include := map[string]bool{}
	for _, f := range all {
		if match(f) {
			include[f] = true
		}
	}
	if len(include) > 0 {
		return include, true
	}
	for _, f := range all {
		include[f] = true
	}
	return include, false
}

// globRegexp translates an fnmatch pattern ("*" and "?" cross "/") into a
// linear-time regular expression; no pattern can make it backtrack. Braces
// give alternatives as shells and ripgrep read them ("**/*.{ts,tsx}"):
// the default pattern of a run of several languages is one
// ("**/*{.py,.go}"), and models write them; fnmatch alone would match no
// file and search everything, saying so.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?s:` + globExpr(pattern) + `)$`)
}

// globExpr is the regular expression of a glob pattern, unanchored.
func globExpr(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(pattern) && pattern[j] == '!' {
				j++
			}
			if j < len(pattern) && pattern[j] == ']' {
				j++
			}
			for j < len(pattern) && pattern[j] != ']' {
				j++
			}
			if j >= len(pattern) {
				b.WriteString(`\[`)
				continue
			}
			class := pattern[i+1 : j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i = j
		case '{':
			end := strings.IndexByte(pattern[i:], '}')
			if end < 0 || !strings.Contains(pattern[i:i+end], ",") {
				b.WriteString(`\{`) // no alternatives: a brace is itself
				continue
			}
			var alts []string
			for alt := range strings.SplitSeq(pattern[i+1:i+end], ",") {
				alts = append(alts, globExpr(alt))
			}
			b.WriteString("(?:" + strings.Join(alts, "|") + ")")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

func (s *Set) preview(n codegraph.NodeID, ti int, source string) queryResult {
	g := s.idx.Graph
	start, end := g.Lines(n)
	return queryResult{format: formatPreview, node: n, hasNode: true, file: codegraph.FileOfID(g.Node(n).ID),
		start: start, end: end, terms: []int{ti}, source: source}
}

func (s *Set) fold(n codegraph.NodeID, ti int, source string) queryResult {
	return queryResult{format: formatFold, node: n, hasNode: true, file: codegraph.FileOfID(s.idx.Graph.Node(n).ID),
		terms: []int{ti}, source: source}
}

// searchEntity: exact id, then name lookup, then BM25 over node ids (fuzzy
// when BM25 finds nothing). more reports whether the chunk search should
// run too.
func (s *Set) searchEntity(term string, ti int, include map[string]bool) (results []queryResult, more bool) {
	g := s.idx.Graph
	if n, ok := g.HasNode(term); ok {
		return []queryResult{{format: formatComplete, node: n, hasNode: true, file: codegraph.FileOfID(term),
			terms: []int{ti}, source: fmt.Sprintf("Exact match found for entity name `%s`.", term)}}, false
	}
	if base := g.Languages().CanonicalID(term); base != term {
		if n, ok := g.HasNode(base); ok {
			return []queryResult{s.preview(n, ti, fmt.Sprintf("Exact match found for entity name `%s`.", base))}, false
		}
	}
	more = true
	found := s.lookupName(term, include, "")
	if found == nil {
		found = s.lookupName(term, nil, "")
	}
	usedTerm, subTerm := term, false
	if found == nil && strings.Contains(term, ".") {
		dot := strings.LastIndexByte(term, '.')
		prefix := ""
		if fields := strings.Fields(term[:dot]); len(fields) > 0 {
			prefix = fields[len(fields)-1]
		}
		last := strings.TrimSpace(term[dot+1:])
		usedTerm = last
		found = s.lookupName(last, include, prefix)
		if found == nil {
			found = s.lookupName(last, nil, prefix)
		}
		if found == nil {
			subTerm = true
			found = s.lookupName(last, nil, "")
		}
	}
	for _, group := range found {
		if len(group) <= 3 {
			for _, n := range group {
				results = append(results, s.preview(n, ti, fmt.Sprintf("Match found for entity name `%s`.", usedTerm)))
			}
			continue
		}
		for _, n := range group {
			results = append(results, s.fold(n, ti, fmt.Sprintf("Match found for entity name `%s`.", usedTerm)))
		}
		more = subTerm
	}
	if !more {
		return results, false
	}
	nodes := s.bm25Nodes(term, include)
	if len(nodes) == 0 {
		nodes = s.bm25Nodes(term, nil)
	}
	if len(nodes) == 0 {
		nodes = g.FuzzyNodes(term, include, fuzzyTopK)
	}
	shown := 0
	const src = "Retrieved entity using keyword search (bm25)."
	for _, n := range nodes[:min(5, len(nodes))] {
		switch g.Node(n).Type {
		case codegraph.File, codegraph.Directory:
			results = append(results, s.fold(n, ti, src))
		default:
			if shown < 3 {
				shown++
				results = append(results, s.preview(n, ti, src))
			}
		}
	}
	return results, true
}

// bm25Nodes searches node ids; with include, ids in those files are
// preferred (all hits are returned when none is in them).
func (s *Set) bm25Nodes(term string, include map[string]bool) []codegraph.NodeID {
	g := s.idx.Graph
	hits := s.idx.Nodes.Search(term, bm25TopK)
	if include == nil {
		return hits
	}
	var in []codegraph.NodeID
	for _, n := range hits {
		if include[codegraph.FileOfID(g.Node(n).ID)] {
			in = append(in, n)
		}
	}
	if len(in) > 0 {
		return in
	}
	return hits
}

// lookupName is the reference's global name lookup: files by base name and
// stem, classes and functions by their last name segment; exact case
// first, then lowercase. A leading "class ", "function ", "method " or
// "def " is ignored (the reference also cuts six characters off any name
// starting with "Class", such as "ClassifierMixin"; a2farm does not). prefix ("A.B" of "A.B.c") must appear among the id's
// path and name parts. It returns matches grouped by node type in first-
// seen order, or nil.
func (s *Set) lookupName(term string, include map[string]bool, prefix string) [][]codegraph.NodeID {
	for _, kw := range []string{"class ", "Class ", "function ", "Function ", "method ", "Method ", "def "} {
		if rest, ok := strings.CutPrefix(term, kw); ok {
			term = strings.TrimSpace(rest)
			break
		}
	}
	names := s.idx.Graph.Names()
	nodes, ok := names.Exact[term]
	if !ok {
		if nodes, ok = names.Lower[strings.ToLower(term)]; !ok {
			return nil
		}
	}
	var prefixParts []string
	if prefix != "" {
		prefixParts = strings.Split(strings.ToLower(prefix), ".")
	}
	g := s.idx.Graph
	var order []codegraph.NodeType
	groups := map[codegraph.NodeType][]codegraph.NodeID{}
	for _, n := range nodes {
		id := g.Node(n).ID
		if include != nil && !include[codegraph.FileOfID(id)] {
			continue
		}
		if len(prefixParts) > 0 {
			lower := strings.ToLower(id)
			for _, ext := range g.Languages().Extensions() {
				lower = strings.ReplaceAll(lower, ext, "")
			}
			parts := idParts.Split(lower, -1)
			parts = parts[:len(parts)-1]
			if !containsAll(parts, prefixParts) {
				continue
			}
		}
		t := g.Node(n).Type
		if _, seen := groups[t]; !seen {
			order = append(order, t)
		}
		groups[t] = append(groups[t], n)
	}
	if len(order) == 0 {
		return nil
	}
	out := make([][]codegraph.NodeID, len(order))
	for i, t := range order {
		out[i] = groups[t]
	}
	return out
}

var idParts = regexp.MustCompile(`[./:]`)

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// searchChunks ranks code chunks for the term and turns the best ones (in
// the searched files) into results: previews of the entities a chunk
// covers, or a snippet when it holds module-level code.
func (s *Set) searchChunks(term string, ti int, include map[string]bool) []queryResult {
	g := s.idx.Graph
	hits, err := s.idx.Chunks.Search(s.idx.Engine, term, bm25TopK)
	if err != nil {
		return nil
	}
	const src = "Retrieved code content using keyword search (bm25)."
	isMeta := func(span string) bool { return span == "docstring" || span == "imports" || span == "comments" }
	var out []queryResult
	for _, h := range hits {
		c := s.idx.Chunks.Chunks[h.Doc]
		if !include[c.File] {
			continue
		}
		meta := 0
		for _, sp := range c.SpanIDs {
			if isMeta(sp) {
				meta++
			}
		}
		switch {
		case meta == len(c.SpanIDs):
			out = append(out, queryResult{format: formatSnippet, file: c.File, start: c.StartLine, end: c.EndLine,
				terms: []int{ti}, source: src})
		case meta > 0:
			type ent struct {
				n          codegraph.NodeID
				start, end int
			}
			var ents []ent
			for _, sp := range c.SpanIDs {
				if n, ok := g.HasNode(c.File + ":" + sp); ok {
					st, en := g.Lines(n)
					ents = append(ents, ent{n, st, en})
				}
			}
			slices.SortStableFunc(ents, func(a, b ent) int { return a.start - b.start })
			var msg strings.Builder
			var ids []string
			for _, e := range ents {
				ids = append(ids, "`"+g.Node(e.n).ID+"`")
			}
			if len(ents) > 0 {
				if first := ents[0]; first.start < c.StartLine {
					fmt.Fprintf(&msg, "The code for %s `%s` is incomplete; search `%s` for the full content if needed.\n", g.Node(first.n).Type, g.Node(first.n).ID, g.Node(first.n).ID)
				}
				if last := ents[len(ents)-1]; last.end > c.EndLine {
					fmt.Fprintf(&msg, "The code for %s `%s` is incomplete; search `%s` for the full content if needed.\n", g.Node(last.n).Type, g.Node(last.n).ID, g.Node(last.n).ID)
				}
			}
			message := msg.String()
			if strings.TrimSpace(message) != "" {
				message = "Hint: \n" + message
			}
			out = append(out, queryResult{format: formatSnippet, file: c.File, start: c.StartLine, end: c.EndLine,
				terms: []int{ti}, source: src, desc: "Found " + strings.Join(ids, ", ") + ".", message: message})
		default:
			for _, sp := range c.SpanIDs {
				if n, ok := g.HasNode(c.File + ":" + sp); ok {
					out = append(out, s.preview(n, ti, src))
				}
			}
		}
	}
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}

// searchLines maps line numbers of one file to the class or function that
// holds them (a method when the class has one there), or to ±20-line
// windows for lines outside any.
func (s *Set) searchLines(file codegraph.NodeID, lines []int, ti int, term string) []queryResult {
	g := s.idx.Graph
	src := fmt.Sprintf("Retrieved code context including %s.", term)
	_, fileEnd := g.Lines(file)
	var out []queryResult
	seen := map[codegraph.NodeID]bool{}
	var windows [][2]int
	for _, line := range lines {
		n, ok := s.entityAtLine(file, line)
		if !ok {
			windows = append(windows, [2]int{max(1, line-lineContext), min(fileEnd, line+lineContext)})
			continue
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, s.preview(n, ti, src))
		}
	}
	for _, w := range mergeIntervals(windows) {
		out = append(out, queryResult{format: formatSnippet, file: g.Node(file).ID, start: w[0], end: w[1], terms: []int{ti}, source: src})
	}
	return out
}

// entityAtLine: the first top-level class or function of the file whose
// lines hold line, refined to a member of a class.
func (s *Set) entityAtLine(file codegraph.NodeID, line int) (codegraph.NodeID, bool) {
	g := s.idx.Graph
	within := func(parent codegraph.NodeID) (codegraph.NodeID, bool) {
		for _, nb := range g.Neighbours(parent, false) {
			if !slices.Contains(nb.Types, codegraph.Contains) {
				continue
			}
			if st, en := g.Lines(nb.Node); st <= line && line <= en {
				return nb.Node, true
			}
		}
		return 0, false
	}
	n, ok := within(file)
	if !ok {
		return 0, false
	}
	if g.Node(n).Type == codegraph.Class {
		if m, ok := within(n); ok {
			return m, true
		}
	}
	return n, true
}

func mergeIntervals(in [][2]int) [][2]int {
	if len(in) == 0 {
		return nil
	}
	slices.SortFunc(in, func(a, b [2]int) int { return a[0] - b[0] })
	out := [][2]int{in[0]}
	for _, iv := range in[1:] {
		last := &out[len(out)-1]
		if iv[0] <= last[1] {
			last[1] = max(last[1], iv[1])
		} else {
			out = append(out, iv)
		}
	}
	return out
}

// mergeResults keeps every snippet and one result per entity, in the best
// format seen, with the terms of all results for it.
func mergeResults(in []queryResult) []queryResult {
	var snippets []queryResult
	var merged []queryResult
	pos := map[codegraph.NodeID]int{}
	for _, r := range in {
		if r.format == formatSnippet {
			snippets = append(snippets, r)
			continue
		}
		if !r.hasNode {
			continue
		}
		i, ok := pos[r.node]
		if !ok {
			pos[r.node] = len(merged)
			merged = append(merged, r)
			continue
		}
		m := &merged[i]
		if !slices.Contains(m.terms, r.terms[0]) {
			m.terms = append(m.terms, r.terms...)
		}
		if r.format < m.format {
			m.format, m.start, m.end, m.source = r.format, r.start, r.end, r.source
		}
	}
	return append(snippets, merged...)
}

type resultGroup struct {
	terms    []int
	byFormat [4][]queryResult
}

// groupResults groups results by the exact list of terms that produced
// them, groups ordered by their first term.
func groupResults(in []queryResult, nTerms int) []resultGroup {
	var groups []resultGroup
	key := func(terms []int) string { return fmt.Sprint(terms) }
	pos := map[string]int{}
	for _, r := range in {
		k := key(r.terms)
		i, ok := pos[k]
		if !ok {
			i = len(groups)
			pos[k] = i
			groups = append(groups, resultGroup{terms: r.terms})
		}
		groups[i].byFormat[r.format] = append(groups[i].byFormat[r.format], r)
	}
	first := func(g resultGroup) int {
		best := nTerms
		for _, t := range g.terms {
			best = min(best, t)
		}
		return best
	}
	slices.SortStableFunc(groups, func(a, b resultGroup) int { return first(a) - first(b) })
	return groups
}

// formatGroup renders one group's results: completes, snippets, previews
// (small ones inside another small one of the same file dropped), folds.
func (s *Set) formatGroup(byFormat [4][]queryResult, sf *surfacer) string {
	var b strings.Builder
	for _, r := range byFormat[formatComplete] {
		b.WriteString(s.render(r, sf) + "\n")
	}
	for _, r := range byFormat[formatSnippet] {
		b.WriteString(s.render(r, sf) + "\n")
	}
	if previews := byFormat[formatPreview]; len(previews) > 0 {
		var kept []queryResult
		var fileOrder []string
		small := map[string][]queryResult{}
		for _, r := range previews {
			if r.end-r.start < maxPreviewLines {
				if _, ok := small[r.file]; !ok {
					fileOrder = append(fileOrder, r.file)
				}
				small[r.file] = append(small[r.file], r)
			} else {
				kept = append(kept, r)
			}
		}
		for _, f := range fileOrder {
			rs := small[f]
			slices.SortStableFunc(rs, func(a, b queryResult) int {
				if a.start != b.start {
					return a.start - b.start
				}
				return b.end - a.end
			})
			maxEnd := -1
			for _, r := range rs {
				if r.end > maxEnd {
					kept = append(kept, r)
					maxEnd = r.end
				}
			}
		}
		for _, r := range kept {
			b.WriteString(s.render(r, sf) + "\n")
		}
	}
	if folds := byFormat[formatFold]; len(folds) > 0 {
		src := ""
		for _, r := range folds {
			if src == "" {
				src = r.source
			}
			if src != r.source {
				b.WriteString("Source: " + src + "\n\n")
				src = r.source
			}
			b.WriteString(s.render(r, sf))
		}
		b.WriteString("Source: " + src + "\n")
		if len(folds) > 1 {
			b.WriteString("Hint: Use more detailed query to get the full content of some if needed.\n")
		} else {
			fmt.Fprintf(&b, "Hint: Search `%s` for the full content if needed.\n", s.idx.Graph.Node(folds[0].node).ID)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// render formats one result as the reference's QueryResult.format_output.
func (s *Set) render(r queryResult, sf *surfacer) string {
	g := s.idx.Graph
	var b strings.Builder
	switch r.format {
	case formatComplete:
		node := g.Node(r.node)
		fmt.Fprintf(&b, "Found %s `%s`.\nSource: %s\n", node.Type, node.ID, r.source)
		if code, ok := g.Render(r.node); ok {
			b.WriteString(code + "\n")
		}
		sf.add(g, r.node)
	case formatPreview:
		node := g.Node(r.node)
		fmt.Fprintf(&b, "Found %s `%s`.\nSource: %s\n", node.Type, node.ID, r.source)
		switch node.Type {
		case codegraph.Function:
			if code, ok := g.Render(r.node); ok {
				b.WriteString(code + "\n")
			}
		case codegraph.Class, codegraph.File:
			start, end := g.Lines(r.node)
			if end-start <= maxPreviewLines {
				if code, ok := g.Render(r.node); ok {
					b.WriteString(code + "\n")
				}
			} else {
				fmt.Fprintf(&b, "Just show the structure of this %s due to response length limitations:\n```\n%s\n```\n", node.Type, g.Skeleton(r.node))
				fmt.Fprintf(&b, "Hint: Search `%s` to get the full content if needed.\n", node.ID)
			}
		}
		sf.add(g, r.node)
	case formatSnippet:
		if r.desc != "" {
			b.WriteString(r.desc + "\n")
		} else {
			fmt.Fprintf(&b, "Found code snippet in file `%s`.\n", r.file)
		}
		b.WriteString("Source: " + r.source + "\n")
		if n, ok := g.HasNode(r.file); ok {
			code, _ := g.Render(n)
			numbered := strings.Split(code, "\n")
			if len(numbered) >= 2 {
				numbered = numbered[1 : len(numbered)-1]
			}
			lo, hi := max(r.start-1, 0), min(r.end, len(numbered))
			if lo < hi {
				b.WriteString("```\n" + strings.Join(numbered[lo:hi], "\n") + "\n```\n")
			} else {
				b.WriteString("```\n\n```\n")
			}
			sf.add(g, n)
		}
		if strings.TrimSpace(r.message) != "" {
			b.WriteString(r.message)
		}
	case formatFold:
		node := g.Node(r.node)
		fmt.Fprintf(&b, "Found %s `%s`.\n", node.Type, node.ID)
		sf.add(g, r.node)
	}
	return b.String()
}

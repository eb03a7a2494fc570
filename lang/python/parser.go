package python

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	ts "github.com/tree-sitter/go-tree-sitter"
	tspython "github.com/tree-sitter/tree-sitter-python/bindings/go"

	"github.com/a2farm/a2farm/lang"
)

// structureQuery finds every node the extractor cares about in one pass of
// the C query engine; nesting is then rebuilt in Go from byte ranges, which
// is far cheaper than walking the tree node by node through cgo.
const structureQuery = `
(class_definition name: (identifier) @name) @class
(function_definition name: (identifier) @name) @function
(decorator) @decorator
[(import_statement) (import_from_statement) (future_import_statement)] @import
(call function: (identifier) @callee) @call
(call function: (attribute attribute: (identifier) @callee)) @call
[(print_statement) (exec_statement)] @legacy
`

// Pattern indexes of structureQuery, in order.
const (
	patternClass = iota
	patternFunction
	patternDecorator
	patternImport
	patternCallName
	patternCallAttr
	patternLegacy
)

// kindIDs caches the numeric ids of node kinds so that hot paths compare
// integers instead of allocating a Go string per Kind() call.
type kindIDs struct {
	module, block, comment, exprStatement, assignment            uint16
	str, concatStr, interpolation                                uint16
	functionDef, classDef, decoratedDef, call, attribute, ident  uint16
	ifStmt, elifClause, elseClause, forStmt, whileStmt, withStmt uint16
	tryStmt, exceptClause, exceptGroupClause, matchStmt, caseCl  uint16
	dottedName, aliasedImport, relativeImport, importPrefix      uint16
	wildcardImport, keywordArgument, importFrom, futureImport    uint16
	patternList, tuplePattern, listPattern, tuple, list, asyncKw uint16
	parenExpr                                                    uint16
}

func newKindIDs(l *ts.Language) kindIDs {
	id := func(kind string) uint16 { return l.IdForNodeKind(kind, true) }
	return kindIDs{
		module: id("module"), block: id("block"), comment: id("comment"),
		exprStatement: id("expression_statement"), assignment: id("assignment"),
		str: id("string"), concatStr: id("concatenated_string"), interpolation: id("interpolation"),
		functionDef: id("function_definition"), classDef: id("class_definition"),
		decoratedDef: id("decorated_definition"), call: id("call"), attribute: id("attribute"),
		ident: id("identifier"), ifStmt: id("if_statement"), elifClause: id("elif_clause"),
		elseClause: id("else_clause"), forStmt: id("for_statement"), whileStmt: id("while_statement"),
		withStmt: id("with_statement"), tryStmt: id("try_statement"), exceptClause: id("except_clause"),
		exceptGroupClause: id("except_group_clause"), matchStmt: id("match_statement"),
		caseCl: id("case_clause"), dottedName: id("dotted_name"), aliasedImport: id("aliased_import"),
		relativeImport: id("relative_import"), importPrefix: id("import_prefix"),
		wildcardImport: id("wildcard_import"), keywordArgument: id("keyword_argument"),
		importFrom: id("import_from_statement"), futureImport: id("future_import_statement"),
		patternList: id("pattern_list"), tuplePattern: id("tuple_pattern"), listPattern: id("list_pattern"),
		tuple: id("tuple"), list: id("list"), asyncKw: l.IdForNodeKind("async", false),
		parenExpr: id("parenthesized_expression"),
	}
}

// grammar is the compiled Python language and queries. Compiling the
// queries costs milliseconds — more than parsing a small repository — and
// a compiled query is immutable and safe to share between threads (each
// parser runs it with its own cursor), so a process compiles it once.
type grammar struct {
	lang  *ts.Language
	query *ts.Query
	strQ  *ts.Query
	kinds kindIDs
}

// compiledGrammar lives as long as the process, like a package-level
// regexp: it is never closed.
var compiledGrammar = sync.OnceValues(func() (*grammar, error) {
	useLibcAllocator()
	lang := ts.NewLanguage(tspython.Language())
	query, qerr := ts.NewQuery(lang, structureQuery)
	if qerr != nil {
		return nil, fmt.Errorf("pyparse: compile query: %w", qerr)
	}
	strQ, qerr := ts.NewQuery(lang, stringQuery)
	if qerr != nil {
		query.Close()
		return nil, fmt.Errorf("pyparse: compile query: %w", qerr)
	}
	return &grammar{lang: lang, query: query, strQ: strQ, kinds: newKindIDs(lang)}, nil
})

// Parser parses Python files. Create one with NewParser and release it with
// Close; it is not safe for concurrent use.
type Parser struct {
	*grammar
	parser *ts.Parser
	cursor *ts.QueryCursor
}

// NewParser returns a parser for Python 3 (and most Python 2) source.
func NewParser() (*Parser, error) {
	g, err := compiledGrammar()
	if err != nil {
		return nil, err
	}
	parser := ts.NewParser()
	if err := parser.SetLanguage(g.lang); err != nil {
		parser.Close()
		return nil, fmt.Errorf("pyparse: set language: %w", err)
	}
	return &Parser{grammar: g, parser: parser, cursor: ts.NewQueryCursor()}, nil
}

// stringQuery finds string literals; it runs only on files whose bytes
// contain an escape Python 3 may reject.
const stringQuery = `(string) @s`

// Close releases the parser's C memory. The parser must not be used after.
func (p *Parser) Close() {
	if p.parser == nil {
		return
	}
	p.cursor.Close()
	p.parser.Close()
	*p = Parser{}
}

// ErrClosed is returned by Parse after Close.
var ErrClosed = errors.New("pyparse: parser is closed")

// parseState is the scratch data of one Parse call.
type parseState struct {
	p     *Parser
	src   []byte
	file  *File
	defs  []*defNode
	calls []rawCall
	imps  []Import
	// importStarts holds the start byte of each entry of imps.
	importStarts []uint32
}

type defNode struct {
	def *Def
	// decoStart is where the definition's decorators begin (its StartByte
	// when undecorated).
	decoStart uint32
	parent    *defNode
}

type rawCall struct {
	call  Call
	start uint32
}

// Parse extracts the structure of one file. path is the repository-relative
// path; it is used to resolve relative imports.
func (p *Parser) Parse(path string, src []byte) (*File, error) {
	if p.parser == nil {
		return nil, ErrClosed
	}
	return p.parse(path, blankNumberTables(src))
}

// parse extracts the structure of src as given.
func (p *Parser) parse(path string, src []byte) (*File, error) {
	tree := p.parser.Parse(src, nil)
	if tree == nil {
		return nil, fmt.Errorf("pyparse: %s: parser returned no tree", path)
	}
	defer tree.Close()
	root := tree.RootNode()
	st := &parseState{
		p:   p,
		src: src,
		file: &File{
			Path:      path,
			Lines:     lang.CountLines(src),
			HasErrors: root.HasError(),
		},
	}
	st.collect(root)
	if !st.file.LegacySyntax && mayHaveBadEscape(src) {
		st.file.LegacySyntax = st.hasBadEscape(root)
	}
	st.nest()
	st.attribute()
	st.moduleLevel(root)
	return st.file, nil
}

func (st *parseState) text(n *ts.Node) string {
	return string(st.src[n.StartByte():n.EndByte()])
}

// collect runs the structure query and records definitions, decorators,
// imports and calls.
func (st *parseState) collect(root *ts.Node) {
	p := st.p
	byStart := map[uint32]*defNode{}
	type deco struct {
		node      ts.Node
		defStart  uint32
		decoStart uint32
	}
	var decos []deco
	matches := p.cursor.Matches(p.query, root, st.src)
	for m := matches.Next(); m != nil; m = matches.Next() {
		switch m.PatternIndex {
		case patternClass, patternFunction:
			var node, name *ts.Node
			for i := range m.Captures {
				c := &m.Captures[i]
				if p.query.CaptureNames()[c.Index] == "name" {
					name = &c.Node
				} else {
					node = &c.Node
				}
			}
			if node == nil || name == nil {
				continue
			}
			d := st.newDef(node, st.text(name), m.PatternIndex == patternClass)
			dn := &defNode{def: d, decoStart: d.StartByte}
			byStart[d.StartByte] = dn
			st.defs = append(st.defs, dn)
		case patternDecorator:
			n := m.Captures[0].Node
			parent := n.Parent()
			if parent == nil || parent.KindId() != p.kinds.decoratedDef {
				continue
			}
			def := parent.ChildByFieldName("definition")
			if def == nil {
				continue
			}
			decos = append(decos, deco{node: n, defStart: uint32(def.StartByte()), decoStart: uint32(parent.StartByte())})
		case patternImport:
			n := m.Captures[0].Node
			imp := st.newImport(&n)
			imp.Depth = st.astDepth(&n)
			imp.Direct = st.directInBody(&n)
			st.imps = append(st.imps, imp)
			st.importStarts = append(st.importStarts, uint32(n.StartByte()))
		case patternLegacy:
			st.file.LegacySyntax = true
		case patternCallName, patternCallAttr:
			var callee *ts.Node
			var call *ts.Node
			for i := range m.Captures {
				c := &m.Captures[i]
				if p.query.CaptureNames()[c.Index] == "callee" {
					callee = &c.Node
				} else {
					call = &c.Node
				}
			}
			if callee == nil || call == nil {
				continue
			}
			st.calls = append(st.calls, rawCall{
				call: Call{
					Name:      st.text(callee),
					Attribute: m.PatternIndex == patternCallAttr,
					Line:      int(call.StartPosition().Row) + 1,
				},
				start: uint32(call.StartByte()),
			})
		}
	}
	for _, dc := range decos {
		dn := byStart[dc.defStart]
		if dn == nil {
			continue
		}
		dn.def.Decorators = append(dn.def.Decorators, Decorator{
			Span: Span{Start: int(dc.node.StartPosition().Row) + 1, End: st.endLine(&dc.node)},
			Name: st.decoratorName(&dc.node),
		})
		dn.decoStart = min(dn.decoStart, dc.decoStart)
	}
}

func (st *parseState) newDef(node *ts.Node, name string, class bool) *Def {
	k := st.p.kinds
	endLine, endByte := st.endOf(node)
	d := &Def{
		Kind:      KindFunction,
		Name:      name,
		Span:      Span{Start: int(node.StartPosition().Row) + 1, End: endLine},
		StartByte: uint32(node.StartByte()),
		EndByte:   endByte,
		Depth:     st.astDepth(node),
	}
	if class {
		d.Kind = KindClass
		if sup := node.ChildByFieldName("superclasses"); sup != nil {
			for i := uint(0); i < sup.NamedChildCount(); i++ {
				arg := sup.NamedChild(i)
				if kid := arg.KindId(); kid == k.keywordArgument || kid == k.comment {
					continue
				}
				d.Bases = append(d.Bases, st.text(arg))
			}
		}
	} else if first := node.Child(0); first != nil && first.KindId() == k.asyncKw {
		d.Async = true
	}
	if body := node.ChildByFieldName("body"); body != nil {
		d.Docstring = st.docstring(body)
		d.BodyStart = int(body.StartPosition().Row) + 1
	}
	return d
}

// astDepth counts the Python ast nodes above a definition: compound
// statements, except handlers and match cases each add one level; an elif is
// an If nested in the previous branch's orelse, so the k-th elif adds k.
func (st *parseState) astDepth(node *ts.Node) int {
	k := st.p.kinds
	depth := 1
	for n := node.Parent(); n != nil; n = n.Parent() {
		switch n.KindId() {
		case k.functionDef, k.classDef, k.ifStmt, k.forStmt, k.whileStmt, k.withStmt,
			k.tryStmt, k.exceptClause, k.exceptGroupClause, k.matchStmt, k.caseCl:
			depth++
		case k.elifClause:
			depth += st.branchIndex(n, true)
		case k.elseClause:
			if parent := n.Parent(); parent != nil && parent.KindId() == k.ifStmt {
				depth += st.branchIndex(n, false)
			}
		}
	}
	return depth
}

// directInBody reports whether a statement sits directly in the body of a
// module, class or function (not nested in a compound statement).
func (st *parseState) directInBody(n *ts.Node) bool {
	k := st.p.kinds
	parent := n.Parent()
	if parent == nil {
		return false
	}
	if parent.KindId() == k.module {
		return true
	}
	if parent.KindId() != k.block {
		return false
	}
	owner := parent.Parent()
	return owner != nil && (owner.KindId() == k.functionDef || owner.KindId() == k.classDef)
}

// branchIndex counts the elif clauses before n (plus n itself when
// inclusive) among its if statement's children.
func (st *parseState) branchIndex(n *ts.Node, inclusive bool) int {
	count := 0
	if inclusive {
		count = 1
	}
	for s := n.PrevSibling(); s != nil; s = s.PrevSibling() {
		if s.KindId() == st.p.kinds.elifClause {
			count++
		}
	}
	return count
}

// endLine returns the 1-based line of the last token of n that is not a
// comment, matching Python's end_lineno (tree-sitter lets a block swallow
// the comments that follow its last statement).
func (st *parseState) endLine(n *ts.Node) int {
	line, _ := st.endOf(n)
	return line
}

// endOf returns the line and end byte of the last token of n that is not a
// comment.
func (st *parseState) endOf(n *ts.Node) (int, uint32) {
	k := st.p.kinds
	cur := *n
	for {
		count := cur.ChildCount()
		var last *ts.Node
		for i := int(count) - 1; i >= 0; i-- {
			c := cur.Child(uint(i))
			if c == nil || c.KindId() == k.comment || (c.IsMissing() && c.StartByte() == c.EndByte()) {
				continue
			}
			last = c
			break
		}
		if last == nil {
			break
		}
		cur = *last
	}
	end := cur.EndPosition()
	row := int(end.Row)
	if end.Column == 0 && row > int(cur.StartPosition().Row) {
		row--
	}
	return row + 1, uint32(cur.EndByte())
}

// firstStatement returns the first named child of a block or module that is
// not a comment.
func (st *parseState) firstStatement(body *ts.Node) *ts.Node {
	for i := uint(0); i < body.NamedChildCount(); i++ {
		c := body.NamedChild(i)
		if c.KindId() != st.p.kinds.comment {
			return c
		}
	}
	return nil
}

// docstring reports the docstring of a body, if its first statement is a
// plain (not f-, not bytes) string literal expression.
func (st *parseState) docstring(body *ts.Node) *Docstring {
	k := st.p.kinds
	stmt := st.firstStatement(body)
	if stmt == nil || stmt.KindId() != k.exprStatement || stmt.NamedChildCount() != 1 {
		return nil
	}
	lit := stmt.NamedChild(0)
	var parts []*ts.Node
	switch lit.KindId() {
	case k.str:
		parts = []*ts.Node{lit}
	case k.concatStr:
		for i := uint(0); i < lit.NamedChildCount(); i++ {
			if c := lit.NamedChild(i); c.KindId() == k.str {
				parts = append(parts, c)
			}
		}
	default:
		return nil
	}
	var b strings.Builder
	for _, part := range parts {
		v, ok := decodeStringLiteral(st.text(part))
		if !ok {
			return nil
		}
		b.WriteString(v)
	}
	return &Docstring{
		Span: Span{Start: int(lit.StartPosition().Row) + 1, End: st.endLine(lit)},
		Text: b.String(),
	}
}

func (st *parseState) decoratorName(n *ts.Node) string {
	k := st.p.kinds
	expr := n.NamedChild(0)
	if expr == nil {
		return ""
	}
	if expr.KindId() == k.call {
		if fn := expr.ChildByFieldName("function"); fn != nil {
			expr = fn
		}
	}
	return strings.Join(strings.Fields(st.text(expr)), "")
}

func (st *parseState) newImport(n *ts.Node) Import {
	k := st.p.kinds
	imp := Import{Span: Span{Start: int(n.StartPosition().Row) + 1, End: st.endLine(n)}}
	kind := n.KindId()
	switch kind {
	case k.importFrom:
		imp.From = true
		if mod := n.ChildByFieldName("module_name"); mod != nil {
			if mod.KindId() == k.relativeImport {
				for i := uint(0); i < mod.NamedChildCount(); i++ {
					c := mod.NamedChild(i)
					switch c.KindId() {
					case k.importPrefix:
						imp.Level = strings.Count(st.text(c), ".")
					case k.dottedName:
						imp.Module = st.dotted(c)
					}
				}
			} else {
				imp.Module = st.dotted(mod)
			}
		}
	case k.futureImport:
		imp.From = true
		imp.Module = "__future__"
	}
	for i := uint(0); i < n.NamedChildCount(); i++ {
		c := n.NamedChild(i)
		if field := n.FieldNameForNamedChild(uint32(i)); field != "name" {
			if c.KindId() == k.wildcardImport {
				imp.Star = true
			}
			continue
		}
		switch c.KindId() {
		case k.dottedName:
			imp.Names = append(imp.Names, ImportName{Name: st.dotted(c)})
		case k.aliasedImport:
			name := c.ChildByFieldName("name")
			alias := c.ChildByFieldName("alias")
			in := ImportName{}
			if name != nil {
				in.Name = st.dotted(name)
			}
			if alias != nil {
				in.Alias = st.text(alias)
			}
			imp.Names = append(imp.Names, in)
		}
	}
	if imp.From {
		imp.Resolved = resolveModule(st.file.Path, imp.Level, imp.Module)
	}
	return imp
}

// dotted returns a dotted name without the whitespace or comments Python
// allows between its parts.
func (st *parseState) dotted(n *ts.Node) string {
	return strings.Join(strings.Fields(st.text(n)), "")
}

// resolveModule turns a (possibly relative) from-import into an absolute
// dotted module name, given the importing file's repository path. Like the
// reference graph builder, a relative import that climbs above the
// repository root resolves from the root.
func resolveModule(path string, level int, module string) string {
	if level == 0 {
		return module
	}
	parts := strings.Split(path, "/") // the file name counts as one level
	if len(parts) >= level {
		parts = slices.Clone(parts[:len(parts)-level])
	} else {
		parts = nil
	}
	if module != "" {
		parts = append(parts, module)
	}
	return strings.Join(parts, ".")
}

// nest sorts definitions into a tree by byte containment and fills in
// qualified names and the Method flag.
func (st *parseState) nest() {
	slices.SortFunc(st.defs, func(a, b *defNode) int { return int(a.def.StartByte) - int(b.def.StartByte) })
	var stack []*defNode
	for _, dn := range st.defs {
		for len(stack) > 0 && stack[len(stack)-1].def.EndByte <= dn.def.StartByte {
			stack = stack[:len(stack)-1]
		}
		d := dn.def
		if len(stack) == 0 {
			d.QualName = d.Name
			st.file.Defs = append(st.file.Defs, d)
		} else {
			parent := stack[len(stack)-1]
			dn.parent = parent
			d.QualName = parent.def.QualName + "." + d.Name
			d.Method = d.Kind == KindFunction && parent.def.Kind == KindClass && d.Depth == parent.def.Depth+1
			parent.def.Children = append(parent.def.Children, d)
		}
		stack = append(stack, dn)
	}
}

// attribute assigns calls and imports to their enclosing definitions.
// Definitions are swept in source order with their decorators included, so
// a call inside a decorator goes to the decorated definition.
func (st *parseState) attribute() {
	byDeco := slices.Clone(st.defs)
	slices.SortStableFunc(byDeco, func(a, b *defNode) int { return int(a.decoStart) - int(b.decoStart) })
	slices.SortStableFunc(st.calls, func(a, b rawCall) int { return int(a.start) - int(b.start) })

	// innermost returns the innermost definition whose extended range
	// [decoStart, EndByte) contains pos; positions must be non-decreasing.
	var stack []*defNode
	next := 0
	innermost := func(pos uint32) *defNode {
		for next < len(byDeco) && byDeco[next].decoStart <= pos {
			for len(stack) > 0 && stack[len(stack)-1].def.EndByte <= byDeco[next].decoStart {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, byDeco[next])
			next++
		}
		for len(stack) > 0 && stack[len(stack)-1].def.EndByte <= pos {
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	for _, rc := range st.calls {
		dn := innermost(rc.start)
		if dn == nil {
			st.file.Calls = append(st.file.Calls, rc.call)
			continue
		}
		c := rc.call
		c.InDecorator = rc.start < dn.def.StartByte
		dn.def.Calls = append(dn.def.Calls, c)
	}

	// Imports: the scope is the innermost definition body (decorators
	// cannot contain imports).
	stack, next = stack[:0], 0
	order := make([]int, len(st.imps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(st.importStarts[a]) - int(st.importStarts[b]) })
	for _, i := range order {
		if dn := innermost(st.importStarts[i]); dn != nil {
			st.imps[i].Scope = dn.def.QualName
		}
	}
	st.file.Imports = st.imps
}

// moduleLevel records the module docstring and the module-level simple and
// annotated assignments. As in the reference extractor (libcst statement
// lines), an assignment counts only when it is the first statement on its
// line.
func (st *parseState) moduleLevel(root *ts.Node) {
	k := st.p.kinds
	st.file.Docstring = st.docstring(root)
	prevEndRow := -1
	for i := uint(0); i < root.NamedChildCount(); i++ {
		c := root.NamedChild(i)
		if c.KindId() == k.comment {
			continue
		}
		startRow := int(c.StartPosition().Row)
		first := startRow != prevEndRow
		prevEndRow = int(c.EndPosition().Row)
		if !first || c.KindId() != k.exprStatement || c.NamedChildCount() == 0 {
			continue
		}
		assign := c.NamedChild(0)
		if assign.KindId() != k.assignment {
			continue
		}
		a := Assignment{
			Span:      Span{Start: startRow + 1, End: st.endLine(c)},
			Annotated: assign.ChildByFieldName("type") != nil,
		}
		for cur := assign; cur != nil && cur.KindId() == k.assignment; cur = cur.ChildByFieldName("right") {
			if left := cur.ChildByFieldName("left"); left != nil {
				a.Targets = st.targets(left, a.Targets)
			}
		}
		st.file.Assignments = append(st.file.Assignments, a)
	}
}

// targets flattens an assignment target into names: tuple and list patterns
// are unpacked, attributes and subscripts are kept as written.
func (st *parseState) targets(n *ts.Node, out []string) []string {
	k := st.p.kinds
	switch n.KindId() {
	case k.patternList, k.tuplePattern, k.listPattern, k.tuple, k.list, k.parenExpr:
		for i := uint(0); i < n.NamedChildCount(); i++ {
			out = st.targets(n.NamedChild(i), out)
		}
		return out
	case k.comment:
		return out
	}
	return append(out, strings.TrimLeft(st.text(n), "*"))
}

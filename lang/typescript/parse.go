package typescript

import (
	"errors"
	"path"
	"strconv"
	"strings"
	"sync"

	ts "github.com/tree-sitter/go-tree-sitter"
	tsjs "github.com/tree-sitter/tree-sitter-javascript/bindings/go"
	tsts "github.com/tree-sitter/tree-sitter-typescript/bindings/go"

	"github.com/a2farm/a2farm/lang"
)

// loadQuery finds require("x") and import("x") anywhere in a file in one
// pass of the C query engine.
const loadQuery = `(call_expression function: [(identifier) (import)] @fn arguments: (arguments . (string (string_fragment) @spec)))`

// grammar is one compiled grammar and its query.
type grammar struct {
	lang  *ts.Language
	query *ts.Query
}

// grammars are TypeScript, TSX and JavaScript, compiled once a process.
var grammars = sync.OnceValue(func() map[string]*grammar {
	out := map[string]*grammar{}
	for name, ptr := range map[string]func() *ts.Language{
		"typescript": func() *ts.Language { return ts.NewLanguage(tsts.LanguageTypescript()) },
		"tsx":        func() *ts.Language { return ts.NewLanguage(tsts.LanguageTSX()) },
		"javascript": func() *ts.Language { return ts.NewLanguage(tsjs.Language()) },
	} {
		l := ptr()
		q, err := ts.NewQuery(l, loadQuery)
		if err != nil {
			panic("lang/typescript: the load query does not compile for " + name + ": " + err.Error())
		}
		out[name] = &grammar{lang: l, query: q}
	}
	return out
})

// grammarOf picks the grammar of a file by its extension.
func grammarOf(p string) string {
	switch path.Ext(p) {
	case ".ts", ".mts", ".cts":
		return "typescript"
	case ".tsx":
		return "tsx"
	}
	return "javascript" // it reads JSX too
}

// parser holds a tree-sitter parser per grammar.
type parser struct {
	parsers map[string]*ts.Parser
	cursor  *ts.QueryCursor
}

func newParser() (*parser, error) {
	p := &parser{parsers: map[string]*ts.Parser{}, cursor: ts.NewQueryCursor()}
	for name, g := range grammars() {
		tp := ts.NewParser()
		if err := tp.SetLanguage(g.lang); err != nil {
			tp.Close()
			p.Close()
			return nil, err
		}
		p.parsers[name] = tp
	}
	return p, nil
}

func (p *parser) Close() {
	for _, tp := range p.parsers {
		tp.Close()
	}
	p.cursor.Close()
}

// Parse extracts a file's top-level classes with their methods, its
// top-level functions, and its imports: import and export-from statements
// (From set, Names the imported names with their local aliases) and
// require() or import() calls anywhere.
func (p *parser) Parse(file string, src []byte) (*lang.File, error) {
	name := grammarOf(file)
	tree := p.parsers[name].Parse(src, nil)
	if tree == nil {
		return nil, errors.New("tree-sitter returned no tree")
	}
	defer tree.Close()
	root := tree.RootNode()
	f := &lang.File{Path: file, Lines: lang.CountLines(src), HasErrors: root.HasError()}
	r := reader{src: src}
	// Overload signatures right before a function's implementation belong
	// to its span; a signature without one (declare function) is no
	// definition.
	var overloads struct {
		name  string
		first *ts.Node
	}
	for i := range root.NamedChildCount() {
		n := root.NamedChild(i)
		// A declaration's span starts at its export keyword or the
		// first decorator before it, as the TypeScript compiler's does.
		outer := n
		if n.Kind() == "export_statement" {
			if src := n.ChildByFieldName("source"); src != nil {
				f.Imports = append(f.Imports, lang.Import{Span: span(n), From: true, Module: r.stringValue(src), Depth: 1, Direct: true})
				continue
			}
			if d := n.ChildByFieldName("declaration"); d != nil {
				n = d
			} else if v := n.ChildByFieldName("value"); v != nil {
				n = v // export default class X {}
			}
		}
		if n.Kind() == "comment" {
			continue // between overloads and their implementation too
		}
		if n.Kind() == "ambient_declaration" && n.NamedChildCount() > 0 {
			n = n.NamedChild(0) // declare class C {}: a class declaration too
		}
		if n.Kind() == "function_signature" {
			if name := r.text(n.ChildByFieldName("name")); name != overloads.name || overloads.first == nil {
				overloads.name, overloads.first = name, outer
			}
			continue
		}
		pending := overloads
		overloads.name, overloads.first = "", nil
		switch n.Kind() {
		case "class_declaration", "abstract_class_declaration", "class":
			if d := r.class(n); d != nil {
				startAt(d, outer)
				f.Defs = append(f.Defs, d)
			}
		case "function_declaration", "generator_function_declaration":
			if d := r.function(n, r.text(n.ChildByFieldName("name")), ""); d != nil {
				startAt(d, outer)
				if pending.first != nil && pending.name == d.Name {
					startAt(d, pending.first)
				}
				f.Defs = append(f.Defs, d)
			}
		case "lexical_declaration", "variable_declaration":
			for j := range n.NamedChildCount() {
				decl := n.NamedChild(j)
				if decl.Kind() != "variable_declarator" || !isFunction(decl.ChildByFieldName("value")) {
					continue
				}
				if d := r.function(decl, r.text(decl.ChildByFieldName("name")), ""); d != nil {
					f.Defs = append(f.Defs, d)
				}
			}
		case "import_statement":
			f.Imports = append(f.Imports, r.importStatement(n))
		}
	}
	g := grammars()[name]
	matches := p.cursor.Matches(g.query, root, src)
	captures := g.query.CaptureNames()
	for m := matches.Next(); m != nil; m = matches.Next() {
		var fn, spec *ts.Node
		for i := range m.Captures {
			switch captures[m.Captures[i].Index] {
			case "fn":
				fn = &m.Captures[i].Node
			case "spec":
				spec = &m.Captures[i].Node
			}
		}
		if fn == nil || spec == nil || fn.Kind() == "identifier" && r.text(fn) != "require" {
			continue
		}
		f.Imports = append(f.Imports, lang.Import{Span: span(fn.Parent()), Module: r.text(spec), Depth: 2})
	}
	return f, nil
}

// startAt makes a definition start where node n does.
func startAt(d *lang.Def, n *ts.Node) {
	d.Span.Start = int(n.StartPosition().Row) + 1
	d.StartByte = uint32(n.StartByte())
}

type reader struct{ src []byte }

func (r reader) text(n *ts.Node) string {
	if n == nil {
		return ""
	}
	return string(r.src[n.StartByte():n.EndByte()])
}

// stringValue is a string literal's value.
func (r reader) stringValue(n *ts.Node) string {
	t := r.text(n)
	if len(t) >= 2 && (t[0] == '"' || t[0] == '\'') {
		if t[0] == '\'' {
			t = `"` + strings.ReplaceAll(t[1:len(t)-1], `"`, `\"`) + `"`
		}
		if v, err := strconv.Unquote(t); err == nil {
			return v
		}
		return t[1 : len(t)-1]
	}
	return t
}

func span(n *ts.Node) lang.Span {
	return lang.Span{Start: int(n.StartPosition().Row) + 1, End: int(n.EndPosition().Row) + 1}
}

// isFunction reports an arrow function or function expression.
func isFunction(n *ts.Node) bool {
	if n == nil {
		return false
	}
	switch n.Kind() {
	case "arrow_function", "function_expression", "function", "generator_function":
		return true
	}
	return false
}

// function makes a function definition of node n named name; class is
// the enclosing class of a method ("" for a top-level function).
func (r reader) function(n *ts.Node, name, class string) *lang.Def {
	if name == "" {
		return nil
	}
	d := &lang.Def{Kind: lang.KindFunction, Name: name, QualName: name, Span: span(n), Depth: 1,
		StartByte: uint32(n.StartByte()), EndByte: uint32(n.EndByte()), BodyStart: int(n.StartPosition().Row) + 1}
	if class != "" {
		d.QualName, d.Method, d.Depth = class+"."+name, true, 2
	}
	return d
}

// class reads a class declaration: its base (what it extends, as
// written) and its methods, constructor, accessors and function-valued
// properties.
func (r reader) class(n *ts.Node) *lang.Def {
	name := r.text(n.ChildByFieldName("name"))
	if name == "" {
		return nil
	}
	d := &lang.Def{Kind: lang.KindClass, Name: name, QualName: name, Span: span(n), Depth: 1,
		StartByte: uint32(n.StartByte()), EndByte: uint32(n.EndByte()), BodyStart: int(n.StartPosition().Row) + 1}
	for i := range n.NamedChildCount() {
		c := n.NamedChild(i)
		if c.Kind() != "class_heritage" {
			continue
		}
		// TypeScript: (class_heritage (extends_clause value: X));
		// JavaScript: (class_heritage X).
		base := c.NamedChild(0)
		if base != nil && base.Kind() == "extends_clause" {
			base = base.ChildByFieldName("value")
		}
		if base != nil {
			d.Bases = append(d.Bases, r.text(base))
		}
	}
	body := n.ChildByFieldName("body")
	if body == nil {
		return d
	}
	seen := map[string]bool{}
	var decorated *ts.Node // the first decorator before the member
	for i := range body.NamedChildCount() {
		m := body.NamedChild(i)
		if m.Kind() == "decorator" {
			if decorated == nil {
				decorated = m
			}
			continue
		}
		first := decorated
		decorated = nil
		var name string
		switch m.Kind() {
		case "method_definition":
			name = r.text(m.ChildByFieldName("name"))
		case "public_field_definition", "field_definition":
			value := m.ChildByFieldName("value")
			if !isFunction(value) {
				continue
			}
			name = r.text(m.ChildByFieldName("name"))
			if name == "" {
				name = r.text(m.ChildByFieldName("property"))
			}
		default:
			continue
		}
		if name == "" || seen[name] {
			continue // a setter after its getter: one id per name
		}
		seen[name] = true
		if md := r.function(m, name, d.Name); md != nil {
			if first != nil {
				startAt(md, first)
			}
			d.Children = append(d.Children, md)
		}
	}
	return d
}

// importStatement reads `import ... from "x"` or `import "x"`: each named
// import as its name and local alias, a default import as "default".
func (r reader) importStatement(n *ts.Node) lang.Import {
	imp := lang.Import{Span: span(n), From: true, Module: r.stringValue(n.ChildByFieldName("source")), Depth: 1, Direct: true}
	for i := range n.NamedChildCount() {
		clause := n.NamedChild(i)
		if clause.Kind() != "import_clause" {
			continue
		}
		for j := range clause.NamedChildCount() {
			c := clause.NamedChild(j)
			switch c.Kind() {
			case "identifier":
				imp.Names = append(imp.Names, lang.ImportName{Name: "default", Alias: r.text(c)})
			case "named_imports":
				for k := range c.NamedChildCount() {
					spec := c.NamedChild(k)
					if spec.Kind() != "import_specifier" {
						continue
					}
					imp.Names = append(imp.Names, lang.ImportName{Name: r.text(spec.ChildByFieldName("name")),
						Alias: r.text(spec.ChildByFieldName("alias"))})
				}
			}
		}
	}
	return imp
}

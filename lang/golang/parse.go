package golang

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	ts "github.com/tree-sitter/go-tree-sitter"
	tsgo "github.com/tree-sitter/tree-sitter-go/bindings/go"

	"github.com/a2farm/a2farm/lang"
)

// callQuery finds every call site in one pass of the C query engine,
// which is far cheaper than walking function bodies node by node through
// cgo: f(...), pkg.F(...) or x.M(...) on a name, and .M(...) on anything
// else.
const callQuery = `
(call_expression function: (identifier) @name) @call
(call_expression function: (selector_expression operand: (identifier) @operand field: (field_identifier) @name)) @call
(call_expression function: (selector_expression operand: (_) @other field: (field_identifier) @name)) @call
`

// grammar is the compiled Go language and call query, shared by every
// parser (a compiled query is immutable; each parser runs it with its
// own cursor).
var grammar = sync.OnceValues(func() (*ts.Language, *ts.Query) {
	l := ts.NewLanguage(tsgo.Language())
	q, err := ts.NewQuery(l, callQuery)
	if err != nil {
		panic("lang/golang: the call query does not compile: " + err.Error())
	}
	return l, q
})

// parser reads Go files with tree-sitter-go into the neutral model.
type parser struct {
	p      *ts.Parser
	query  *ts.Query
	cursor *ts.QueryCursor
}

func newParser() (*parser, error) {
	l, q := grammar()
	p := ts.NewParser()
	if err := p.SetLanguage(l); err != nil {
		p.Close()
		return nil, err
	}
	return &parser{p: p, query: q, cursor: ts.NewQueryCursor()}, nil
}

func (p *parser) Close() {
	p.cursor.Close()
	p.p.Close()
}

// Parse extracts a file's top-level types, functions and methods, its
// imports and the calls in each function's body. A method's QualName is
// "Type.Method" (the receiver's base type, pointer and type parameters
// stripped); a type's Bases are its embedded types as written ("Base",
// "pkg.Base").
func (p *parser) Parse(path string, src []byte) (*lang.File, error) {
	tree := p.p.Parse(src, nil)
	if tree == nil {
		return nil, errors.New("tree-sitter returned no tree")
	}
	defer tree.Close()
	root := tree.RootNode()
	f := &lang.File{Path: path, Lines: lang.CountLines(src), HasErrors: root.HasError()}
	r := reader{src: src, calls: p.calls(root, src)}
	for i := range root.NamedChildCount() {
		n := root.NamedChild(i)
		switch n.Kind() {
		case "function_declaration":
			if d := r.function(n, ""); d != nil {
				f.Defs = append(f.Defs, d)
			}
		case "method_declaration":
			recvName, recv := r.receiver(n.ChildByFieldName("receiver"))
			if d := r.function(n, recv); d != nil && recv != "" {
				// Calls on the receiver are marked "*.M": Link resolves
				// them to the receiver type's methods.
				for i, c := range d.Calls {
					if name, ok := strings.CutPrefix(c.Name, recvName+"."); ok && recvName != "" && recvName != "_" {
						d.Calls[i].Name = receiverCall + name
					}
				}
				f.Defs = append(f.Defs, d)
			}
		case "type_declaration":
			for j := range n.NamedChildCount() {
				spec := n.NamedChild(j)
				if k := spec.Kind(); k == "type_spec" || k == "type_alias" {
					if d := r.typeSpec(spec); d != nil {
						f.Defs = append(f.Defs, d)
					}
				}
			}
		case "import_declaration":
			f.Imports = append(f.Imports, r.imports(n)...)
		case "var_declaration", "const_declaration":
			f.Assignments = append(f.Assignments, lang.Assignment{Span: span(n)})
		}
	}
	return f, nil
}

// reader holds the source the nodes point into and the file's call
// sites in source order.
type reader struct {
	src   []byte
	calls []callSite
}

// callSite is a call and where it starts.
type callSite struct {
	call  lang.Call
	start uint
}

// calls runs the call query over the file: f(...) as Name "f", x.f(...)
// as "x.f" with Attribute set, a method of anything else as ".f".
func (p *parser) calls(root *ts.Node, src []byte) []callSite {
	var out []callSite
	names := p.query.CaptureNames()
	matches := p.cursor.Matches(p.query, root, src)
	for m := matches.Next(); m != nil; m = matches.Next() {
		var call, name, operand *ts.Node
		other := false
		for i := range m.Captures {
			c := &m.Captures[i]
			switch names[c.Index] {
			case "call":
				call = &c.Node
			case "name":
				name = &c.Node
			case "operand":
				operand = &c.Node
			case "other":
				other = true
			}
		}
		if call == nil || name == nil {
			continue
		}
		text := string(src[name.StartByte():name.EndByte()])
		site := callSite{start: call.StartByte(), call: lang.Call{Name: text, Line: int(call.StartPosition().Row) + 1}}
		switch {
		case operand != nil:
			site.call.Name = string(src[operand.StartByte():operand.EndByte()]) + "." + text
			site.call.Attribute = true
		case other:
			site.call.Name = "." + text
			site.call.Attribute = true
		}
		// The third pattern matches a name operand too: keep the second's.
		if n := len(out); n > 0 && out[n-1].start == site.start && out[n-1].call.Attribute && site.call.Name == "."+text {
			continue
		}
		out = append(out, site)
	}
	return out
}

func (r reader) text(n *ts.Node) string {
	if n == nil {
		return ""
	}
	return string(r.src[n.StartByte():n.EndByte()])
}

func span(n *ts.Node) lang.Span {
	return lang.Span{Start: int(n.StartPosition().Row) + 1, End: int(n.EndPosition().Row) + 1}
}

// function reads a function or method declaration; recv is the method's
// receiver type ("" for a function).
func (r reader) function(n *ts.Node, recv string) *lang.Def {
	name := r.text(n.ChildByFieldName("name"))
	if name == "" {
		return nil
	}
	d := &lang.Def{Kind: lang.KindFunction, Name: name, QualName: name, Span: span(n), Depth: 1,
		StartByte: uint32(n.StartByte()), EndByte: uint32(n.EndByte()), Method: recv != ""}
	if recv != "" {
		d.QualName = recv + "." + name
	}
	if body := n.ChildByFieldName("body"); body != nil {
		d.BodyStart = int(body.StartPosition().Row) + 1
		for _, c := range r.calls {
			if c.start >= body.StartByte() && c.start < body.EndByte() {
				d.Calls = append(d.Calls, c.call)
			}
		}
	} else {
		d.BodyStart = d.Span.End
	}
	return d
}

// receiverCall prefixes the calls of a method on its own receiver.
const receiverCall = "*."

// receiver is a method's receiver variable and the base name of its type:
// "t", "T" for (t T), (t *T), (t *T[K, V]); "", "T" for (T[K]).
func (r reader) receiver(recv *ts.Node) (name, typ string) {
	if recv == nil {
		return "", ""
	}
	for i := range recv.NamedChildCount() {
		param := recv.NamedChild(i)
		if param.Kind() != "parameter_declaration" {
			continue
		}
		typ = r.typeName(param.ChildByFieldName("type"))
		if typ == "" || strings.Contains(typ, ".") {
			return "", "" // not a type of this package: no method of ours
		}
		return r.text(param.ChildByFieldName("name")), typ
	}
	return "", ""
}

// typeSpec reads one type spec or alias of a (possibly grouped) type
// declaration; its span is the spec's own.
func (r reader) typeSpec(n *ts.Node) *lang.Def {
	name := r.text(n.ChildByFieldName("name"))
	if name == "" {
		return nil
	}
	d := &lang.Def{Kind: lang.KindClass, Name: name, QualName: name, Span: span(n), Depth: 1,
		StartByte: uint32(n.StartByte()), EndByte: uint32(n.EndByte())}
	d.BodyStart = d.Span.Start
	t := n.ChildByFieldName("type")
	if t == nil {
		return d
	}
	switch t.Kind() {
	case "struct_type":
		// Embedded fields: a field declaration with a type and no name.
		list := firstNamedOfKind(t, "field_declaration_list")
		for i := range childCount(list) {
			field := list.NamedChild(i)
			if field.Kind() != "field_declaration" || field.ChildByFieldName("name") != nil {
				continue
			}
			if base := r.typeName(field.ChildByFieldName("type")); base != "" {
				d.Bases = append(d.Bases, base)
			}
		}
	case "interface_type":
		for i := range t.NamedChildCount() {
			elem := t.NamedChild(i)
			if elem.Kind() != "type_elem" || elem.NamedChildCount() != 1 {
				continue // a union or a method
			}
			if base := r.typeName(elem.NamedChild(0)); base != "" {
				d.Bases = append(d.Bases, base)
			}
		}
	}
	return d
}

// typeName is a named type as written, "T" or "pkg.T", with pointers and
// type arguments stripped; "" for any other type.
func (r reader) typeName(t *ts.Node) string {
	for t != nil {
		switch t.Kind() {
		case "pointer_type", "parenthesized_type":
			t = t.NamedChild(0)
		case "generic_type":
			t = t.ChildByFieldName("type")
		case "type_identifier":
			return r.text(t)
		case "qualified_type":
			return r.text(t.ChildByFieldName("package")) + "." + r.text(t.ChildByFieldName("name"))
		default:
			return ""
		}
	}
	return ""
}

// imports reads the specs of one import declaration: Module is the
// import path, the one name its alias ("." and "_" included).
func (r reader) imports(n *ts.Node) []lang.Import {
	var specs []*ts.Node
	var collect func(*ts.Node)
	collect = func(n *ts.Node) {
		for i := range n.NamedChildCount() {
			c := n.NamedChild(i)
			switch c.Kind() {
			case "import_spec":
				specs = append(specs, c)
			case "import_spec_list":
				collect(c)
			}
		}
	}
	collect(n)
	var out []lang.Import
	for _, spec := range specs {
		path, err := strconv.Unquote(r.text(spec.ChildByFieldName("path")))
		if err != nil || path == "" {
			continue
		}
		out = append(out, lang.Import{Span: span(spec), Module: path, Depth: 1, Direct: true,
			Names: []lang.ImportName{{Name: path, Alias: r.text(spec.ChildByFieldName("name"))}}})
	}
	return out
}

func firstNamedOfKind(n *ts.Node, kind string) *ts.Node {
	for i := range n.NamedChildCount() {
		if c := n.NamedChild(i); c.Kind() == kind {
			return c
		}
	}
	return nil
}

func childCount(n *ts.Node) uint {
	if n == nil {
		return 0
	}
	return n.NamedChildCount()
}

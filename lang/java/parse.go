package java

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"

	ts "github.com/tree-sitter/go-tree-sitter"
	tsjava "github.com/tree-sitter/tree-sitter-java/bindings/go"

	"github.com/a2farm/a2farm/lang"
)

// callQuery finds every call site in one pass of the C query engine:
// m(...), x.m(...) on anything, and new T(...).
const callQuery = `
(method_invocation object: (_) @object name: (identifier) @name) @call
(method_invocation !object name: (identifier) @name) @call
(object_creation_expression type: (_) @type) @call
`

// grammar is the compiled Java language and call query, shared by every
// parser (a compiled query is immutable; each parser runs it with its
// own cursor).
var grammar = sync.OnceValues(func() (*ts.Language, *ts.Query) {
	l := ts.NewLanguage(tsjava.Language())
	q, err := ts.NewQuery(l, callQuery)
	if err != nil {
		panic("lang/java: the call query does not compile: " + err.Error())
	}
	return l, q
})

// Call names, as Parse writes them and Link reads them: "m" for an
// unqualified call, "X.m" for a call on a name or a dotted name (a type,
// a package-qualified type or a variable: Link decides), "this.m" and
// "super.m", ".m" for a call on any other expression, and "new X" for an
// instance creation.
const (
	newCall   = "new "
	thisCall  = "this."
	superCall = "super."
)

// parser reads Java files with tree-sitter-java into the neutral model.
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

// typeKinds are the declarations that are types of the graph.
var typeKinds = map[string]bool{
	"class_declaration":           true,
	"interface_declaration":       true,
	"enum_declaration":            true,
	"record_declaration":          true,
	"annotation_type_declaration": true,
}

// methodKinds are the declarations that are methods of the graph.
var methodKinds = map[string]bool{
	"method_declaration":              true,
	"constructor_declaration":         true,
	"compact_constructor_declaration": true,
}

// Parse extracts a file's package, its imports, its types with their
// methods and nested types (Children, in source order), each type's
// supertypes as written (Bases: "Base", "pkg.Base", type arguments
// stripped) and the calls in each method's body. A static import is From
// (it imports members of a type: Module the type, Names the member); an
// on-demand one is Star.
func (p *parser) Parse(path string, src []byte) (*lang.File, error) {
	tree := p.p.Parse(src, nil)
	if tree == nil {
		return nil, errors.New("tree-sitter returned no tree")
	}
	defer tree.Close()
	root := tree.RootNode()
	f := &lang.File{Path: path, Lines: lang.CountLines(src), HasErrors: root.HasError()}
	r := &reader{src: src}
	for i := range root.NamedChildCount() {
		n := root.NamedChild(i)
		switch k := n.Kind(); {
		case k == "package_declaration":
			for j := range n.NamedChildCount() {
				if c := n.NamedChild(j); c.Kind() == "identifier" || c.Kind() == "scoped_identifier" {
					f.Package = r.text(c)
				}
			}
		case k == "import_declaration":
			if imp, ok := r.importDecl(n); ok {
				f.Imports = append(f.Imports, imp)
			}
		case typeKinds[k]:
			if d := r.typeDecl(n, "", 1); d != nil {
				f.Defs = append(f.Defs, d)
			}
		}
	}
	r.assignCalls(p.calls(root, r))
	return f, nil
}

// reader holds the source the nodes point into and the methods read so
// far, which the calls are then shared out to.
type reader struct {
	src     []byte
	methods []*lang.Def
}

func (r *reader) text(n *ts.Node) string {
	if n == nil {
		return ""
	}
	return string(r.src[n.StartByte():n.EndByte()])
}

func span(n *ts.Node) lang.Span {
	return lang.Span{Start: int(n.StartPosition().Row) + 1, End: int(n.EndPosition().Row) + 1}
}

// typeDecl reads a type declaration and its members; outer is the
// QualName of the type around it ("" at the top level).
func (r *reader) typeDecl(n *ts.Node, outer string, depth int) *lang.Def {
	name := r.text(n.ChildByFieldName("name"))
	if name == "" {
		return nil
	}
	d := &lang.Def{Kind: lang.KindClass, Name: name, QualName: name, Span: span(n), Depth: depth,
		StartByte: uint32(n.StartByte()), EndByte: uint32(n.EndByte())}
	if outer != "" {
		d.QualName = outer + "." + name
	}
	body := n.ChildByFieldName("body")
	d.BodyStart = d.Span.Start
	if body != nil {
		d.BodyStart = int(body.StartPosition().Row) + 1
	}
	for i := range n.NamedChildCount() {
		switch c := n.NamedChild(i); c.Kind() {
		case "superclass":
			d.Bases = append(d.Bases, r.typeName(c.NamedChild(0)))
		case "super_interfaces", "extends_interfaces":
			if list := firstNamedOfKind(c, "type_list"); list != nil {
				for j := range list.NamedChildCount() {
					d.Bases = append(d.Bases, r.typeName(list.NamedChild(j)))
				}
			}
		}
	}
	d.Bases = slices.DeleteFunc(d.Bases, func(b string) bool { return b == "" })
	r.members(body, d, depth)
	return d
}

// members reads the methods and nested types of a type body into
// d.Children; an enum's members follow its constants.
func (r *reader) members(body *ts.Node, d *lang.Def, depth int) {
	if body == nil {
		return
	}
	for i := range body.NamedChildCount() {
		c := body.NamedChild(i)
		switch k := c.Kind(); {
		case k == "enum_body_declarations":
			r.members(c, d, depth)
		case typeKinds[k]:
			if nested := r.typeDecl(c, d.QualName, depth+1); nested != nil {
				d.Children = append(d.Children, nested)
			}
		case methodKinds[k]:
			if m := r.method(c, d.QualName, depth+1); m != nil {
				d.Children = append(d.Children, m)
			}
		}
	}
}

// method reads a method or constructor of the type named owner.
func (r *reader) method(n *ts.Node, owner string, depth int) *lang.Def {
	name := r.text(n.ChildByFieldName("name"))
	if name == "" {
		return nil
	}
	d := &lang.Def{Kind: lang.KindFunction, Name: name, QualName: owner + "." + name, Span: span(n), Depth: depth,
		StartByte: uint32(n.StartByte()), EndByte: uint32(n.EndByte()), Method: true}
	d.BodyStart = d.Span.End
	if body := n.ChildByFieldName("body"); body != nil {
		d.BodyStart = int(body.StartPosition().Row) + 1
	}
	r.methods = append(r.methods, d)
	return d
}

// dottedName is a name or a dotted name: what a call's object must be
// for Link to try it as a type.
var dottedName = regexp.MustCompile(`^[\p{L}_$][\p{L}\p{N}_$]*(\.[\p{L}_$][\p{L}\p{N}_$]*)*$`)

// callSite is a call and where it starts.
type callSite struct {
	call  lang.Call
	start uint
}

// calls runs the call query over the file r reads, in source order.
func (p *parser) calls(root *ts.Node, r *reader) []callSite {
	var out []callSite
	names := p.query.CaptureNames()
	matches := p.cursor.Matches(p.query, root, r.src)
	for m := matches.Next(); m != nil; m = matches.Next() {
		var call, name, object, typ *ts.Node
		for i := range m.Captures {
			c := &m.Captures[i]
			switch names[c.Index] {
			case "call":
				call = &c.Node
			case "name":
				name = &c.Node
			case "object":
				object = &c.Node
			case "type":
				typ = &c.Node
			}
		}
		if call == nil {
			continue
		}
		site := callSite{start: call.StartByte(), call: lang.Call{Line: int(call.StartPosition().Row) + 1}}
		switch {
		case typ != nil:
			t := r.typeName(typ)
			if t == "" {
				continue
			}
			site.call.Name = newCall + t
		case name == nil:
			continue
		case object == nil:
			site.call.Name = r.text(name)
		default:
			site.call.Attribute = true
			switch o := r.text(object); {
			case object.Kind() == "this":
				site.call.Name = thisCall + r.text(name)
			case object.Kind() == "super":
				site.call.Name = superCall + r.text(name)
			case dottedName.MatchString(o):
				site.call.Name = o + "." + r.text(name)
			default:
				site.call.Name = "." + r.text(name)
			}
		}
		out = append(out, site)
	}
	slices.SortStableFunc(out, func(a, b callSite) int { return int(a.start) - int(b.start) })
	return out
}

// assignCalls gives each method the calls inside it. Methods never nest
// (a method inside a method belongs to a local or anonymous class, which
// is not a definition), so each call has at most one.
func (r *reader) assignCalls(calls []callSite) {
	methods := slices.Clone(r.methods)
	slices.SortFunc(methods, func(a, b *lang.Def) int { return int(a.StartByte) - int(b.StartByte) })
	i := 0
	for _, c := range calls {
		for i < len(methods) && uint(methods[i].EndByte) <= c.start {
			i++
		}
		if i < len(methods) && uint(methods[i].StartByte) <= c.start {
			methods[i].Calls = append(methods[i].Calls, c.call)
		}
	}
}

// typeName is a class or interface type as written, "T" or "pkg.T" or
// "Outer.Inner", with type arguments and annotations stripped; "" for any
// other type (primitive, array).
func (r *reader) typeName(t *ts.Node) string {
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case "type_identifier", "identifier":
		return r.text(t)
	case "generic_type":
		return r.typeName(t.NamedChild(0))
	case "scoped_type_identifier", "scoped_identifier":
		var parts []string
		for i := range t.NamedChildCount() {
			c := t.NamedChild(i)
			switch c.Kind() {
			case "annotation", "marker_annotation":
				continue
			}
			part := r.typeName(c)
			if part == "" {
				return ""
			}
			parts = append(parts, part)
		}
		return strings.Join(parts, ".")
	}
	return ""
}

// importDecl reads one import declaration: Module is the imported type or
// package ("java.util.List", "java.util" with Star); a static import is
// From, Module the type and Names its member (none with Star).
func (r *reader) importDecl(n *ts.Node) (lang.Import, bool) {
	imp := lang.Import{Span: span(n), Depth: 1, Direct: true}
	var name string
	for i := range n.ChildCount() {
		c := n.Child(i)
		switch c.Kind() {
		case "static":
			imp.From = true
		case "asterisk":
			imp.Star = true
		case "identifier", "scoped_identifier":
			name = r.text(c)
		}
	}
	name = strings.Join(strings.Fields(name), "")
	if name == "" {
		return imp, false
	}
	imp.Module = name
	if imp.From && !imp.Star {
		i := strings.LastIndexByte(name, '.')
		if i < 0 {
			return imp, false
		}
		imp.Module = name[:i]
		imp.Names = []lang.ImportName{{Name: name[i+1:]}}
	}
	return imp, true
}

func firstNamedOfKind(n *ts.Node, kind string) *ts.Node {
	for i := range n.NamedChildCount() {
		if c := n.NamedChild(i); c.Kind() == kind {
			return c
		}
	}
	return nil
}

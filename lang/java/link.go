package java

import (
	"path"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// Link adds the Java edges, found as javac finds names, through the
// packages the files declare (which makes every source root —
// src/main/java, src/test/java, each module of a Maven or Gradle build —
// work alike):
//
//   - imports: a file → the file declaring each type it imports (a
//     single-type import, or a static import of the type's members) and →
//     each folder holding a package it imports on demand (pkg.*);
//   - inherits: a type → each type it extends or implements that the
//     repository declares: nested in a type around it, in its file,
//     imported, in its package or in a package imported on demand;
//   - invokes: a method → the methods it calls on its own type (m(),
//     this.m(), an inherited method found through its supertypes,
//     super.m()), on a type by name (T.m(), pkg.T.m(), a static import),
//     and the constructor of each type it instantiates (new T(), the
//     type itself when it declares none).
//
// A call on a variable, a field or any other expression is not resolved:
// syntax alone cannot tell its type.
func (Language) Link(g *lang.Graph, units []lang.Unit) {
	ix := newTypeIndex(g, units)
	scopes := make([]*fileScope, len(units))
	for i, u := range units {
		if u.OK && u.Parsed != nil {
			scopes[i] = ix.scope(g, u)
		}
	}
	// Inherits first: invokes look methods up through supertypes.
	for i, u := range units {
		if scopes[i] == nil {
			continue
		}
		for j, d := range u.Definitions {
			if d.Def.Kind != lang.KindClass {
				continue
			}
			src := u.DefNodes[j]
			for _, base := range d.Def.Bases {
				if dst, ok := scopes[i].resolveType(base, d.Def.QualName); ok && dst != src {
					g.AddEdge(src, dst, lang.Inherits, "")
					ix.supers[src] = append(ix.supers[src], dst)
				}
			}
		}
	}
	for i, u := range units {
		if scopes[i] == nil {
			continue
		}
		linked := map[[2]lang.NodeID]bool{}
		for j, d := range u.Definitions {
			if d.Def.Kind != lang.KindFunction {
				continue
			}
			src := u.DefNodes[j]
			owner := d.Parent
			for _, def := range ix.overloads(u, d.Def.QualName) {
				for _, c := range def.Calls {
					dst, ok := scopes[i].resolveCall(c.Name, owner)
					if !ok || linked[[2]lang.NodeID{src, dst}] {
						continue
					}
					linked[[2]lang.NodeID{src, dst}] = true
					g.AddEdge(src, dst, lang.Invokes, "")
				}
			}
		}
	}
}

// typeIndex knows every type of the snapshot by its fully qualified name
// ("com.x.Outer.Inner") and every package by the folders holding it.
type typeIndex struct {
	g        *lang.Graph
	types    map[string]lang.NodeID
	packages map[string][]string // package → folders, in path order
	supers   map[lang.NodeID][]lang.NodeID
}

func newTypeIndex(g *lang.Graph, units []lang.Unit) *typeIndex {
	ix := &typeIndex{g: g, types: map[string]lang.NodeID{}, packages: map[string][]string{}, supers: map[lang.NodeID][]lang.NodeID{}}
	for _, u := range units {
		if !u.OK || u.Parsed == nil {
			continue
		}
		pkg := u.Parsed.Package
		if dir := path.Dir(u.Path); !slices.Contains(ix.packages[pkg], dir) {
			ix.packages[pkg] = append(ix.packages[pkg], dir)
		}
		for i, d := range u.Definitions {
			if d.Def.Kind != lang.KindClass {
				continue
			}
			fqn := qualify(pkg, d.Def.QualName)
			if _, dup := ix.types[fqn]; !dup { // the first file wins, as the first source root does
				ix.types[fqn] = u.DefNodes[i]
			}
		}
	}
	return ix
}

// overloads are the parsed methods one graph id stands for.
func (ix *typeIndex) overloads(u lang.Unit, qual string) []*lang.Def {
	var out []*lang.Def
	u.Parsed.Walk(func(d *lang.Def) bool {
		if d.Kind == lang.KindFunction && d.QualName == qual {
			out = append(out, d)
		}
		return d.Kind == lang.KindClass
	})
	return out
}

// method finds the method named name declared by the type node t or,
// failing that, inherited through its supertypes in the repository.
func (ix *typeIndex) method(t lang.NodeID, name string, seen map[lang.NodeID]bool) (lang.NodeID, bool) {
	if seen[t] {
		return 0, false
	}
	seen[t] = true
	if m, ok := ix.g.Lookup(ix.g.Nodes[t].ID + "." + name); ok && ix.g.Nodes[m].Type == lang.Function {
		return m, true
	}
	for _, s := range ix.supers[t] {
		if m, ok := ix.method(s, name, seen); ok {
			return m, true
		}
	}
	return 0, false
}

// fileScope is what names mean in one file: its package, its own types,
// its imports.
type fileScope struct {
	ix   *typeIndex
	unit lang.Unit
	pkg  string
	// single maps a single-type import's simple name to its type;
	// demand are the packages and types imported on demand.
	single map[string]lang.NodeID
	demand []string
	// staticMember maps a statically imported member name to its types;
	// staticTypes are the types whose members are all imported.
	staticMember map[string][]lang.NodeID
	staticTypes  []lang.NodeID
}

// scope reads a file's imports, adding its imports edges.
func (ix *typeIndex) scope(g *lang.Graph, u lang.Unit) *fileScope {
	s := &fileScope{ix: ix, unit: u, pkg: u.Parsed.Package, single: map[string]lang.NodeID{}, staticMember: map[string][]lang.NodeID{}}
	linked := map[lang.NodeID]bool{}
	link := func(dst lang.NodeID) {
		if !linked[dst] && dst != u.Node {
			linked[dst] = true
			g.AddEdge(u.Node, dst, lang.Imports, "")
		}
	}
	for _, imp := range u.Parsed.Imports {
		switch {
		case imp.From: // static: members of the type Module
			t, ok := ix.types[imp.Module]
			if !ok {
				continue
			}
			link(ix.fileOf(t))
			if imp.Star {
				s.staticTypes = append(s.staticTypes, t)
			}
			for _, n := range imp.Names {
				s.staticMember[n.Name] = append(s.staticMember[n.Name], t)
				if nested, ok := ix.types[imp.Module+"."+n.Name]; ok { // a static nested type
					s.single[n.Name] = nested
				}
			}
		case imp.Star: // a package, or a type's nested types
			s.demand = append(s.demand, imp.Module)
			if t, ok := ix.types[imp.Module]; ok {
				link(ix.fileOf(t))
				continue
			}
			for _, dir := range ix.packages[imp.Module] {
				if n, ok := g.Lookup(folderID(dir)); ok {
					link(n)
				}
			}
		default:
			t, ok := ix.types[imp.Module]
			if !ok {
				continue
			}
			link(ix.fileOf(t))
			s.single[lang.ShortName(imp.Module)] = t
		}
	}
	return s
}

// fileOf is the file node declaring a type node.
func (ix *typeIndex) fileOf(t lang.NodeID) lang.NodeID {
	file, _, _ := strings.Cut(ix.g.Nodes[t].ID, ":")
	n, _ := ix.g.Lookup(file)
	return n
}

// resolveType finds the type a name written inside the type owner
// (a QualName of this file, "" at the top level) refers to, in javac's
// order: a type nested in owner or a type around it, a type of the file,
// a single-type import, a type of the package, a type imported on
// demand; a dotted name is a fully qualified name, or a type found so
// followed by its nested types.
func (s *fileScope) resolveType(name, owner string) (lang.NodeID, bool) {
	first, rest, dotted := strings.Cut(name, ".")
	if dotted {
		if t, ok := s.ix.types[name]; ok {
			return t, true
		}
	}
	t, ok := s.simpleType(first, owner)
	if !ok || !dotted {
		return t, ok
	}
	for seg := range strings.SplitSeq(rest, ".") {
		if t, ok = s.ix.g.Lookup(s.ix.g.Nodes[t].ID + "." + seg); !ok || s.ix.g.Nodes[t].Type != lang.Class {
			return 0, false
		}
	}
	return t, true
}

func (s *fileScope) simpleType(name, owner string) (lang.NodeID, bool) {
	g := s.ix.g
	for scope := owner; ; {
		id := s.unit.Path + ":" + name
		if scope != "" {
			id = s.unit.Path + ":" + scope + "." + name
		}
		if t, ok := g.Lookup(id); ok && g.Nodes[t].Type == lang.Class {
			return t, true
		}
		if scope == "" {
			break
		}
		scope = outerOf(scope)
	}
	if t, ok := s.single[name]; ok {
		return t, true
	}
	if t, ok := s.ix.types[qualify(s.pkg, name)]; ok {
		return t, true
	}
	for _, p := range s.demand {
		if t, ok := s.ix.types[p+"."+name]; ok {
			return t, true
		}
	}
	return 0, false
}

// resolveCall finds the method (or, for "new T", the constructor or the
// type) a call inside a method of the type owner names.
func (s *fileScope) resolveCall(call, owner string) (lang.NodeID, bool) {
	g := s.ix.g
	ownerNode, ok := g.Lookup(s.unit.Path + ":" + owner)
	if !ok {
		return 0, false
	}
	switch {
	case strings.HasPrefix(call, newCall):
		t, ok := s.resolveType(strings.TrimPrefix(call, newCall), owner)
		if !ok {
			return 0, false
		}
		if ctor, ok := g.Lookup(g.Nodes[t].ID + "." + lang.ShortName(g.Nodes[t].ID)); ok {
			return ctor, true
		}
		return t, true
	case strings.HasPrefix(call, thisCall):
		return s.ix.method(ownerNode, strings.TrimPrefix(call, thisCall), map[lang.NodeID]bool{})
	case strings.HasPrefix(call, superCall):
		name := strings.TrimPrefix(call, superCall)
		for _, sup := range s.ix.supers[ownerNode] {
			if m, ok := s.ix.method(sup, name, map[lang.NodeID]bool{}); ok {
				return m, true
			}
		}
		return 0, false
	case strings.HasPrefix(call, "."):
		return 0, false
	}
	if typ, name, ok := cutLast(call); ok {
		t, ok := s.resolveType(typ, owner)
		if !ok {
			return 0, false
		}
		return s.ix.method(t, name, map[lang.NodeID]bool{})
	}
	// An unqualified call: the owner and the types around it, then the
	// static imports.
	for scope := owner; scope != ""; scope = outerOf(scope) {
		if t, ok := g.Lookup(s.unit.Path + ":" + scope); ok {
			if m, ok := s.ix.method(t, call, map[lang.NodeID]bool{}); ok {
				return m, true
			}
		}
	}
	for _, t := range append(s.staticMember[call], s.staticTypes...) {
		if m, ok := g.Lookup(g.Nodes[t].ID + "." + call); ok && g.Nodes[m].Type == lang.Function {
			return m, true
		}
	}
	return 0, false
}

// qualify joins a package and a name ("" is the unnamed package).
func qualify(pkg, name string) string {
	if pkg == "" {
		return name
	}
	return pkg + "." + name
}

// cutLast splits "a.b.c" into "a.b" and "c"; ok is false without a dot.
func cutLast(s string) (before, last string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

// outerOf is the QualName of the type around a nested one, "" for a
// top-level type.
func outerOf(qual string) string {
	before, _, _ := cutLast(qual)
	return before
}

// folderID is the graph id of a folder: "/" for the repository root.
func folderID(folder string) string {
	if folder == "." || folder == "" {
		return "/"
	}
	return folder
}

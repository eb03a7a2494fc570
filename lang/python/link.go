package python

import (
	"regexp"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// Link adds the reference's (§B.1) imports, invokes and inherits edges of
// Python files: imports (file -> file/def for every import anywhere in the
// file; class/function -> file/def for imports directly in their body, a
// class also for those directly in its __init__), invokes (calls in a
// function's own body; calls anywhere in a class's __init__) and inherits
// (base classes). Callee names resolve against the enclosing scopes, the
// file's imports (including names re-exported by imported __init__.py
// files) and import aliases; failing that, against every Python node and
// directory with that last name segment.
func (Language) Link(g *lang.Graph, units []lang.Unit) {
	l := &linker{
		g:       g,
		units:   units,
		paths:   make(map[string]int, len(units)),
		defs:    map[lang.NodeID]*lang.Def{},
		defUnit: map[lang.NodeID]int{},
	}
	for i, u := range units {
		l.paths[u.Path] = i
		for j, n := range u.DefNodes {
			l.defs[n] = u.Definitions[j].Def // a name defined twice: the later definition wins, as its node does
			l.defUnit[n] = i
		}
	}
	l.addFileImports()
	l.addCalls()
}

type linker struct {
	g       *lang.Graph
	units   []lang.Unit
	paths   map[string]int // path -> unit
	defs    map[lang.NodeID]*lang.Def
	defUnit map[lang.NodeID]int
	// fileScope caches the file-level callee candidates of each unit.
	fileScope  map[int]*scope
	innerCache map[lang.NodeID]map[string][]innerEntry
}

// resolve maps a dotted module name to a file of the snapshot, trying
// a/b.py, then a/b/__init__.py.
func (l *linker) resolve(module string) (lang.NodeID, bool) {
	if strings.HasPrefix(module, ".") {
		return 0, false
	}
	for _, p := range moduleFiles(module) {
		if ui, ok := l.paths[p]; ok {
			return l.units[ui].Node, true
		}
	}
	return 0, false
}

// addImport adds the imports edges of one statement from src.
func (l *linker) addImport(src lang.NodeID, imp lang.Import) {
	g := l.g
	if !imp.From {
		for _, n := range imp.Names {
			if dst, ok := l.resolve(n.Name); ok {
				g.AddEdge(src, dst, lang.Imports, n.Alias)
			}
		}
		return
	}
	module := imp.Module
	if imp.Level > 0 {
		module = imp.Resolved
	}
	if imp.Star {
		if dst, ok := l.resolve(module); ok {
			g.AddEdge(src, dst, lang.Imports, "")
		}
		return
	}
	for _, n := range imp.Names {
		if dst, ok := l.resolve(module + "." + n.Name); ok { // a submodule
			g.AddEdge(src, dst, lang.Imports, n.Alias)
			continue
		}
		modFile, ok := l.resolve(module)
		if !ok {
			continue
		}
		if dst, ok := g.Lookup(g.Nodes[modFile].ID + ":" + n.Name); ok {
			g.AddEdge(src, dst, lang.Imports, n.Alias)
		} else {
			g.AddEdge(src, modFile, lang.Imports, n.Alias)
		}
	}
}

// addFileImports adds file -> x imports edges for every import statement
// anywhere in each file, in ast.walk order.
func (l *linker) addFileImports() {
	for _, u := range l.units {
		if !u.OK {
			continue
		}
		for _, imp := range u.Parsed.ImportsBreadthFirst() {
			l.addImport(u.Node, imp)
		}
	}
}

var dottedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*$`)

// addCalls adds, per class and function node in node order, its own
// imports edges and its invokes and inherits edges.
func (l *linker) addCalls() {
	g := l.g
	ours := make(map[int32]bool, len(l.units))
	for _, u := range l.units {
		ours[int32(u.FileIndex)] = true
	}
	global := map[string][]lang.NodeID{}
	for i, n := range g.Nodes {
		if n.Type == lang.Directory || ours[n.FileIndex] {
			global[lang.ShortName(n.ID)] = append(global[lang.ShortName(n.ID)], lang.NodeID(i))
		}
	}
	l.fileScope = map[int]*scope{}
	nodeCount := len(g.Nodes)
	for i := 0; i < nodeCount; i++ {
		n := lang.NodeID(i)
		def, ok := l.defs[n]
		if !ok {
			continue
		}
		ui := l.defUnit[n]
		u := l.units[ui]
		sc := l.scopeOf(ui)
		var invocations, inheritances []string
		if def.Kind == lang.KindClass {
			for _, imp := range u.Parsed.Imports {
				if imp.Direct && imp.Scope == def.QualName {
					l.addImport(n, imp)
				}
			}
			if init := firstInit(def); init != nil {
				for _, imp := range u.Parsed.Imports {
					if imp.Direct && imp.Scope == init.QualName {
						l.addImport(n, imp)
					}
				}
				for _, dec := range init.Decorators {
					invocations = append(invocations, lang.ShortName(dec.Name))
				}
				// ast.walk over __init__ sees every call, its decorators' too.
				var collect func(d *lang.Def)
				collect = func(d *lang.Def) {
					for _, c := range d.Calls {
						invocations = append(invocations, c.Name)
					}
					for _, child := range d.Children {
						collect(child)
					}
				}
				collect(init)
			}
			for _, base := range def.Bases {
				if dottedName.MatchString(base) {
					inheritances = append(inheritances, lang.ShortName(strings.Join(strings.Fields(base), "")))
				}
			}
		} else {
			for _, imp := range u.Parsed.Imports {
				if imp.Direct && imp.Scope == def.QualName {
					l.addImport(n, imp)
				}
			}
			for _, c := range def.Calls {
				if !c.InDecorator {
					invocations = append(invocations, c.Name)
				}
			}
		}
		link := func(names []string, t lang.EdgeType) {
			seen := map[string]bool{}
			for _, name := range names {
				if seen[name] {
					continue
				}
				seen[name] = true
				if targets := l.callees(n, u.Node, sc, name); len(targets) > 0 {
					for _, dst := range targets {
						g.AddEdge(n, dst, t, "")
					}
				} else {
					for _, dst := range global[name] {
						g.AddEdge(n, dst, t, "")
					}
				}
			}
		}
		link(invocations, lang.Invokes)
		link(inheritances, lang.Inherits)
	}
}

// firstInit returns the first synchronous initializer (__init__) directly
// in a class body.
func firstInit(class *lang.Def) *lang.Def {
	for _, c := range class.Children {
		if c.Kind == lang.KindFunction && c.Method && c.Name == initializer && !c.Async {
			return c
		}
	}
	return nil
}

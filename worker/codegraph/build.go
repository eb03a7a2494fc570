package codegraph

import (
	"context"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/internal/lang"
)

// ParseAll parses every file of the snapshot with one parser of l per CPU.
func ParseAll(ctx context.Context, l lang.Language, files []SourceFile) ([]*lang.File, error) {
	out := make([]*lang.File, len(files))
	next := make(chan int, len(files))
	for i := range files {
		next <- i
	}
	close(next)
	g, ctx := errgroup.WithContext(ctx)
	parseArriving(ctx, g, l, files, out, next, min(runtime.GOMAXPROCS(0), max(1, len(files))))
	return out, g.Wait()
}

// parseArriving starts parsers of l in g, each parsing files[i] into
// parsed[i] for every index i that arrives on next, until next closes.
func parseArriving(ctx context.Context, g *errgroup.Group, l lang.Language, files []SourceFile, parsed []*lang.File, next <-chan int, parsers int) {
	for range parsers {
		g.Go(func() error {
			p, err := l.NewParser()
			if err != nil {
				return err
			}
			defer p.Close()
			for i := range next {
				if err := ctx.Err(); err != nil {
					return err
				}
				if parsed[i], err = p.Parse(files[i].Path, files[i].Content); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// BuildGraph builds the code graph of reference §B.1 from parsed files
// (parsed[i] belongs to files[i]; files sorted by path).
//
// Nodes: "/" and every directory holding Python files (recursively), every
// source file, and every class and function (ids "path:Qual.Name"), except a
// synchronous __init__ directly inside a class, whose lines belong to the
// class. A file Python cannot parse keeps its node but gets no children and
// no contains edge.
//
// Edges: contains (dir -> dir/file, file -> top-level defs, def -> nested
// defs), imports (file -> file/def for every import anywhere in the file;
// class/function -> file/def for imports directly in their body, a class
// also for those directly in __init__), invokes (calls in a function's own
// body; calls anywhere in a class's __init__) and inherits (base classes).
// Callee names resolve against the enclosing scopes, the file's imports
// (including names re-exported by imported __init__.py files) and import
// aliases; failing that, against every node with that last name segment.
func BuildGraph(l lang.Language, files []SourceFile, parsedFiles []*lang.File) *Graph {
	b := &builder{
		g:        newGraph(l, files),
		fileNode: make([]NodeID, len(files)),
		fileOK:   make([]bool, len(files)),
		parsed:   parsedFiles,
		paths:    map[string]int{},
		defs:     map[NodeID]*lang.Def{},
	}
	for i, f := range files {
		b.paths[f.Path] = i
	}
	b.g.parsed = parsedFiles
	b.addStructure()
	b.addFileImports()
	b.addCalls()
	return b.g
}

type builder struct {
	g        *Graph
	fileNode []NodeID // file index -> node
	fileOK   []bool   // parsed like Python would
	parsed   []*lang.File
	paths    map[string]int // path -> file index
	defs     map[NodeID]*lang.Def
	defFile  map[NodeID]int
	// fileScope caches the file-level callee candidates of each file.
	fileScope  map[int]*scope
	innerCache innerIndex
}

// dirTree is one directory of the snapshot in walk order.
type dirTree struct {
	name  string // path relative to the root; "/" for the root
	files []int
	dirs  []*dirTree
}

func (b *builder) tree() *dirTree {
	root := &dirTree{name: "/"}
	byName := map[string]*dirTree{"/": root}
	var get func(dir string) *dirTree
	get = func(dir string) *dirTree {
		if dir == "." || dir == "" {
			return root
		}
		if d, ok := byName[dir]; ok {
			return d
		}
		parent := get(path.Dir(dir))
		d := &dirTree{name: dir}
		byName[dir] = d
		parent.dirs = append(parent.dirs, d)
		return d
	}
	for i, f := range b.g.files {
		d := get(path.Dir(f.Path))
		d.files = append(d.files, i)
	}
	var sortTree func(d *dirTree)
	sortTree = func(d *dirTree) {
		slices.SortFunc(d.dirs, func(a, b *dirTree) int { return strings.Compare(a.name, b.name) })
		slices.SortFunc(d.files, func(x, y int) int { return strings.Compare(b.g.files[x].Path, b.g.files[y].Path) })
		for _, c := range d.dirs {
			sortTree(c)
		}
	}
	sortTree(root)
	return root
}

// addStructure adds directory, file, class and function nodes and the
// contains edges, in the order of a top-down directory walk.
func (b *builder) addStructure() {
	g := b.g
	b.defFile = map[NodeID]int{}
	var walk func(d *dirTree, parent NodeID)
	walk = func(d *dirTree, parent NodeID) {
		dirNode := parent
		if d.name == "/" {
			dirNode = g.addNode(Node{ID: "/", Type: Directory, file: -1})
		} else {
			dirNode = g.addNode(Node{ID: d.name, Type: Directory, file: -1})
			g.addEdge(parent, dirNode, Contains, "")
		}
		for _, fi := range d.files {
			b.addFile(fi, dirNode)
		}
		for _, sub := range d.dirs {
			walk(sub, dirNode)
		}
	}
	walk(b.tree(), 0)
}

func (b *builder) addFile(fi int, dirNode NodeID) {
	g := b.g
	f := g.files[fi]
	pf := b.parsed[fi]
	lines := 0
	if pf != nil {
		lines = pf.Lines
	}
	fileNode := g.addNode(Node{ID: f.Path, Type: File, StartLine: 1, EndLine: lines,
		file: int32(fi), start: 0, end: uint32(len(f.Content))})
	b.fileNode[fi] = fileNode
	if pf == nil || pf.HasErrors || pf.LegacySyntax {
		return
	}
	b.fileOK[fi] = true
	type item struct {
		def    *lang.Def
		parent string // qualified name of the parent node, "" for the file
	}
	var items []item
	var visit func(defs []*lang.Def, parent *lang.Def)
	visit = func(defs []*lang.Def, parent *lang.Def) {
		for _, d := range defs {
			if b.isHiddenInit(d, parent) {
				continue // not a node, and nothing inside it is one
			}
			p := ""
			if parent != nil {
				p = parent.QualName
			}
			items = append(items, item{d, p})
			visit(d.Children, d)
		}
	}
	visit(pf.Defs, nil)
	nodes := make([]NodeID, len(items))
	for i, it := range items {
		t := Function
		if it.def.Kind == lang.KindClass {
			t = Class
		}
		nodes[i] = g.addNode(Node{ID: f.Path + ":" + it.def.QualName, Type: t,
			StartLine: it.def.Span.Start, EndLine: it.def.Span.End,
			file: int32(fi), start: it.def.StartByte, end: it.def.EndByte})
		b.defs[nodes[i]] = it.def
		b.defFile[nodes[i]] = fi
	}
	g.addEdge(dirNode, fileNode, Contains, "")
	for i, it := range items {
		parent := fileNode
		if it.parent != "" {
			parent = g.index[f.Path+":"+it.parent]
		}
		g.addEdge(parent, nodes[i], Contains, "")
	}
}

// isHiddenInit: a synchronous initializer (__init__) whose enclosing
// definition is a class is not a graph node.
func (b *builder) isHiddenInit(d, parent *lang.Def) bool {
	return parent != nil && parent.Kind == lang.KindClass && d.Kind == lang.KindFunction &&
		d.Name == b.g.lang.Initializer() && !d.Async
}

// resolve maps a dotted module name to a file of the snapshot, trying the
// language's candidates in order (a/b.py, else a/b/__init__.py).
func (b *builder) resolve(module string) (NodeID, bool) {
	if strings.HasPrefix(module, ".") {
		return 0, false
	}
	for _, p := range b.g.lang.ModuleFiles(module) {
		if fi, ok := b.paths[p]; ok {
			return b.fileNode[fi], true
		}
	}
	return 0, false
}

// addImport adds the imports edges of one statement from src.
func (b *builder) addImport(src NodeID, file string, imp lang.Import) {
	g := b.g
	if !imp.From {
		for _, n := range imp.Names {
			if dst, ok := b.resolve(n.Name); ok {
				g.addEdge(src, dst, Imports, n.Alias)
			}
		}
		return
	}
	module := imp.Module
	if imp.Level > 0 {
		module = imp.Resolved
	}
	if imp.Star {
		if dst, ok := b.resolve(module); ok {
			g.addEdge(src, dst, Imports, "")
		}
		return
	}
	for _, n := range imp.Names {
		if dst, ok := b.resolve(module + "." + n.Name); ok { // a submodule
			g.addEdge(src, dst, Imports, n.Alias)
			continue
		}
		modFile, ok := b.resolve(module)
		if !ok {
			continue
		}
		if dst, ok := g.index[g.Nodes[modFile].ID+":"+n.Name]; ok {
			g.addEdge(src, dst, Imports, n.Alias)
		} else {
			g.addEdge(src, modFile, Imports, n.Alias)
		}
	}
}

// addFileImports adds file -> x imports edges for every import statement
// anywhere in each file, in ast.walk order.
func (b *builder) addFileImports() {
	for fi, f := range b.g.files {
		if !b.fileOK[fi] {
			continue
		}
		for _, imp := range b.parsed[fi].ImportsBreadthFirst() {
			b.addImport(b.fileNode[fi], f.Path, imp)
		}
	}
}

var dottedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*$`)

// addCalls adds, per class and function node in node order, its own
// imports edges and its invokes and inherits edges.
func (b *builder) addCalls() {
	g := b.g
	global := map[string][]NodeID{}
	for i, n := range g.Nodes {
		global[ShortName(n.ID)] = append(global[ShortName(n.ID)], NodeID(i))
	}
	b.fileScope = map[int]*scope{}
	nodeCount := len(g.Nodes)
	for i := 0; i < nodeCount; i++ {
		n := NodeID(i)
		def, ok := b.defs[n]
		if !ok {
			continue
		}
		fi := b.defFile[n]
		file := g.files[fi].Path
		sc := b.scopeOf(fi)
		var invocations, inheritances []string
		if def.Kind == lang.KindClass {
			for _, imp := range b.parsed[fi].Imports {
				if imp.Direct && imp.Scope == def.QualName {
					b.addImport(n, file, imp)
				}
			}
			if init := b.firstInit(def); init != nil {
				for _, imp := range b.parsed[fi].Imports {
					if imp.Direct && imp.Scope == init.QualName {
						b.addImport(n, file, imp)
					}
				}
				for _, dec := range init.Decorators {
					invocations = append(invocations, ShortName(dec.Name))
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
					inheritances = append(inheritances, ShortName(strings.Join(strings.Fields(base), "")))
				}
			}
		} else {
			for _, imp := range b.parsed[fi].Imports {
				if imp.Direct && imp.Scope == def.QualName {
					b.addImport(n, file, imp)
				}
			}
			for _, c := range def.Calls {
				if !c.InDecorator {
					invocations = append(invocations, c.Name)
				}
			}
		}
		link := func(names []string, t EdgeType) {
			seen := map[string]bool{}
			for _, name := range names {
				if seen[name] {
					continue
				}
				seen[name] = true
				if targets := b.callees(n, b.fileNode[fi], sc, name); len(targets) > 0 {
					for _, dst := range targets {
						g.addEdge(n, dst, t, "")
					}
				} else {
					for _, dst := range global[name] {
						g.addEdge(n, dst, t, "")
					}
				}
			}
		}
		link(invocations, Invokes)
		link(inheritances, Inherits)
	}
}

// firstInit returns the first synchronous initializer (__init__) directly
// in a class body.
func (b *builder) firstInit(class *lang.Def) *lang.Def {
	for _, c := range class.Children {
		if c.Kind == lang.KindFunction && c.Method && c.Name == b.g.lang.Initializer() && !c.Async {
			return c
		}
	}
	return nil
}

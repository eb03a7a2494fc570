package python

import "github.com/a2farm/a2farm/lang"

// innerEntry is a node reachable from a container through contains edges
// (descending into classes only), with the container's direct child it
// was reached through.
type innerEntry struct {
	node lang.NodeID
	via  lang.NodeID
}

// scope answers the reference's callee lookup for one file: which nodes a
// bare name may refer to.
type scope struct {
	// imported holds the file-level candidates (imported names, the
	// contents of imported files and classes, re-exports of imported
	// __init__.py files), keyed by short name, each node once.
	imported map[string][]lang.NodeID
	// aliases maps an import alias to its target; a later import wins.
	aliases map[string]lang.NodeID
}

// inner returns the nodes reachable from container through contains edges,
// descending into classes only, grouped by short name.
func (l *linker) inner(container lang.NodeID) map[string][]innerEntry {
	if l.innerCache == nil {
		l.innerCache = map[lang.NodeID]map[string][]innerEntry{}
	}
	if m, ok := l.innerCache[container]; ok {
		return m
	}
	m := map[string][]innerEntry{}
	var walk func(n, via lang.NodeID, top bool)
	walk = func(n, via lang.NodeID, top bool) {
		for _, ei := range l.g.OutEdges(n) {
			e := l.g.Edges[ei]
			if e.Type != lang.Contains {
				continue
			}
			v := via
			if top {
				v = e.Dst
			}
			name := lang.ShortName(l.g.Nodes[e.Dst].ID)
			m[name] = append(m[name], innerEntry{node: e.Dst, via: v})
			if l.g.Nodes[e.Dst].Type == lang.Class {
				walk(e.Dst, v, false)
			}
		}
	}
	walk(container, 0, true)
	l.innerCache[container] = m
	return m
}

// scopeOf returns the file-level scope of file fi (cached).
func (l *linker) scopeOf(ui int) *scope {
	if sc, ok := l.fileScope[ui]; ok {
		return sc
	}
	g := l.g
	fileNode := l.units[ui].Node
	sc := &scope{imported: map[string][]lang.NodeID{}, aliases: map[string]lang.NodeID{}}
	seen := map[lang.NodeID]bool{}
	add := func(n lang.NodeID) {
		if !seen[n] {
			seen[n] = true
			name := lang.ShortName(g.Nodes[n].ID)
			sc.imported[name] = append(sc.imported[name], n)
		}
	}
	addInner := func(container lang.NodeID) {
		for _, entries := range l.inner(container) {
			for _, e := range entries {
				add(e.node)
			}
		}
	}
	useImports := func(from lang.NodeID) {
		for _, ei := range g.OutEdges(from) {
			e := g.Edges[ei]
			if e.Type != lang.Imports {
				continue
			}
			if e.Alias != "" {
				sc.aliases[e.Alias] = e.Dst
			}
			switch g.Nodes[e.Dst].Type {
			case lang.FileNode:
				addInner(e.Dst)
			case lang.Class:
				addInner(e.Dst)
				add(e.Dst)
			case lang.Function:
				add(e.Dst)
			}
		}
	}
	// __init__.py files reachable through imports, as the reference finds
	// them (a stack, so the alias override order matches).
	var initFiles []lang.NodeID
	listed := map[lang.NodeID]bool{fileNode: true}
	stack := []lang.NodeID{fileNode}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, ei := range g.OutEdges(cur) {
			e := g.Edges[ei]
			if e.Type == lang.Imports && !listed[e.Dst] && g.Nodes[e.Dst].Type == lang.FileNode &&
				packageFile(g.Nodes[e.Dst].ID) {
				listed[e.Dst] = true
				initFiles = append(initFiles, e.Dst)
				stack = append(stack, e.Dst)
			}
		}
	}
	for _, f := range initFiles {
		addInner(f)
		useImports(f)
	}
	useImports(fileNode)
	l.fileScope[ui] = sc
	return sc
}

// callees resolves a called (or inherited) name from node n: the inner
// nodes of n and of each enclosing definition up to its file (minus the
// branch n sits in), the file's imported candidates, then the alias.
func (l *linker) callees(n lang.NodeID, fileNode lang.NodeID, sc *scope, name string) []lang.NodeID {
	var out []lang.NodeID
	seen := map[lang.NodeID]bool{}
	add := func(x lang.NodeID) {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	pre, cur := n, n
	for {
		for _, e := range l.inner(cur)[name] {
			if e.via != pre || cur == n {
				add(e.node)
			}
		}
		if cur == fileNode {
			break
		}
		pre, cur = cur, l.parentOf(cur)
	}
	for _, x := range sc.imported[name] {
		add(x)
	}
	if dst, ok := sc.aliases[name]; ok {
		out = append(out, dst) // appended even when already present, as the reference does
	}
	return out
}

// parentOf returns the source of the first contains edge entering n.
func (l *linker) parentOf(n lang.NodeID) lang.NodeID {
	for _, ei := range l.g.InEdges(n) {
		if e := l.g.Edges[ei]; e.Type == lang.Contains {
			return e.Src
		}
	}
	return n
}

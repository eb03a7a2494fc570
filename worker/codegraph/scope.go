package codegraph

// innerEntry is a node reachable from a container through contains edges
// (descending into classes only), with the container's direct child it
// was reached through.
type innerEntry struct {
	node NodeID
	via  NodeID
}

// scope answers the reference's callee lookup for one file: which nodes a
// bare name may refer to.
type scope struct {
	// imported holds the file-level candidates (imported names, the
	// contents of imported files and classes, re-exports of imported
	// __init__.py files), keyed by short name, each node once.
	imported map[string][]NodeID
	// aliases maps an import alias to its target; a later import wins.
	aliases map[string]NodeID
}

// innerIndex caches, per container node, its inner nodes by short name.
type innerIndex map[NodeID]map[string][]innerEntry

// inner returns the nodes reachable from container through contains edges,
// descending into classes only, grouped by short name.
func (b *builder) inner(container NodeID) map[string][]innerEntry {
	if b.innerCache == nil {
		b.innerCache = innerIndex{}
	}
	if m, ok := b.innerCache[container]; ok {
		return m
	}
	m := map[string][]innerEntry{}
	var walk func(n, via NodeID, top bool)
	walk = func(n, via NodeID, top bool) {
		for _, ei := range b.g.out[n] {
			e := b.g.Edges[ei]
			if e.Type != Contains {
				continue
			}
			v := via
			if top {
				v = e.Dst
			}
			name := ShortName(b.g.Nodes[e.Dst].ID)
			m[name] = append(m[name], innerEntry{node: e.Dst, via: v})
			if b.g.Nodes[e.Dst].Type == Class {
				walk(e.Dst, v, false)
			}
		}
	}
	walk(container, 0, true)
	b.innerCache[container] = m
	return m
}

// scopeOf returns the file-level scope of file fi (cached).
func (b *builder) scopeOf(fi int) *scope {
	if sc, ok := b.fileScope[fi]; ok {
		return sc
	}
	g := b.g
	fileNode := b.fileNode[fi]
	sc := &scope{imported: map[string][]NodeID{}, aliases: map[string]NodeID{}}
	seen := map[NodeID]bool{}
	add := func(n NodeID) {
		if !seen[n] {
			seen[n] = true
			name := ShortName(g.Nodes[n].ID)
			sc.imported[name] = append(sc.imported[name], n)
		}
	}
	addInner := func(container NodeID) {
		for _, entries := range b.inner(container) {
			for _, e := range entries {
				add(e.node)
			}
		}
	}
	useImports := func(from NodeID) {
		for _, ei := range g.out[from] {
			e := g.Edges[ei]
			if e.Type != Imports {
				continue
			}
			if e.Alias != "" {
				sc.aliases[e.Alias] = e.Dst
			}
			switch g.Nodes[e.Dst].Type {
			case File:
				addInner(e.Dst)
			case Class:
				addInner(e.Dst)
				add(e.Dst)
			case Function:
				add(e.Dst)
			}
		}
	}
	// __init__.py files reachable through imports, as the reference finds
	// them (a stack, so the alias override order matches).
	var initFiles []NodeID
	listed := map[NodeID]bool{fileNode: true}
	stack := []NodeID{fileNode}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, ei := range g.out[cur] {
			e := g.Edges[ei]
			if e.Type == Imports && !listed[e.Dst] && g.Nodes[e.Dst].Type == File &&
				g.lang.PackageFile(g.Nodes[e.Dst].ID) {
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
	b.fileScope[fi] = sc
	return sc
}

// callees resolves a called (or inherited) name from node n: the inner
// nodes of n and of each enclosing definition up to its file (minus the
// branch n sits in), the file's imported candidates, then the alias.
func (b *builder) callees(n NodeID, fileNode NodeID, sc *scope, name string) []NodeID {
	var out []NodeID
	seen := map[NodeID]bool{}
	add := func(x NodeID) {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	pre, cur := n, n
	for {
		for _, e := range b.inner(cur)[name] {
			if e.via != pre || cur == n {
				add(e.node)
			}
		}
		if cur == fileNode {
			break
		}
		pre, cur = cur, b.parentOf(cur)
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
func (b *builder) parentOf(n NodeID) NodeID {
	for _, ei := range b.g.in[n] {
		if e := b.g.Edges[ei]; e.Type == Contains {
			return e.Src
		}
	}
	return n
}

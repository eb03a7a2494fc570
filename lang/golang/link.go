package golang

import (
	"cmp"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// ReadsProjectFile asks for every go.mod outside vendor/ and testdata/:
// a folder's import path is its module's path joined with the folder's
// place in the module.
func (Language) ReadsProjectFile(p string) bool {
	return path.Base(p) == "go.mod" && !lang.InFolder(p, "vendor", "testdata")
}

// module is one go.mod of the snapshot: its module path and its folder
// ("." for the repository root).
type module struct{ path, dir string }

var modulePattern = regexp.MustCompile(`(?m)^\s*module\s+("([^"]+)"|(\S+))`)

// modules reads the module directive of every go.mod.
func modules(project map[string][]byte) []module {
	var out []module
	for p, data := range project {
		if path.Base(p) != "go.mod" {
			continue
		}
		m := modulePattern.FindSubmatch(data)
		if m == nil {
			continue
		}
		name := string(m[2])
		if name == "" {
			name = string(m[3])
		}
		out = append(out, module{path: name, dir: path.Dir(p)})
	}
	// Longest module path first: a nested module wins over the one
	// around it.
	slices.SortFunc(out, func(a, b module) int {
		return cmp.Or(cmp.Compare(len(b.path), len(a.path)), strings.Compare(a.path, b.path))
	})
	return out
}

// folderOf maps an import path to the repository folder holding the
// package, through the longest module path that prefixes it; ok is false
// for packages outside the repository.
func folderOf(mods []module, importPath string) (string, bool) {
	for _, m := range mods {
		rest, ok := strings.CutPrefix(importPath, m.path)
		if !ok || rest != "" && rest[0] != '/' {
			continue
		}
		return path.Clean(path.Join(m.dir, strings.TrimPrefix(rest, "/"))), true
	}
	return "", false
}

// packageName is the name a file uses for an import without an alias: the
// last element of its path, skipping a major-version suffix ("/v2").
func packageName(importPath string) string {
	parts := strings.Split(importPath, "/")
	last := parts[len(parts)-1]
	if len(parts) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = parts[len(parts)-2]
	}
	return strings.TrimPrefix(last, "go-")
}

// Link adds the Go edges: imports (file → the folder of each imported
// package inside the repository), inherits (a struct or interface → each
// type it embeds that the repository declares) and invokes (calls of
// same-package functions, of pkg.Func in repository packages, and of
// methods on the receiver of the calling method). Calls through any other
// value (a variable, a field, an interface, a returned value) and type
// conversions are not resolved: syntax alone cannot tell their target.
func (Language) Link(g *lang.Graph, units []lang.Unit) {
	mods := modules(g.Project)
	// Every package's top-level names, by folder: functions and types by
	// name, methods by "Type.Method".
	scope := map[string]map[string]lang.NodeID{}
	for _, u := range units {
		if !u.OK {
			continue
		}
		dir := path.Dir(u.Path)
		if scope[dir] == nil {
			scope[dir] = map[string]lang.NodeID{}
		}
		for i, d := range u.Definitions {
			if _, dup := scope[dir][d.Def.QualName]; !dup {
				scope[dir][d.Def.QualName] = u.DefNodes[i]
			}
		}
	}
	for _, u := range units {
		if !u.OK {
			continue
		}
		dir := path.Dir(u.Path)
		// The file's imports: the folder of each name it refers to them by.
		imported := map[string]string{}
		for _, imp := range u.Parsed.Imports {
			folder, ok := folderOf(mods, imp.Module)
			if !ok {
				continue
			}
			node, ok := g.Lookup(folderID(folder))
			if !ok {
				continue // a folder without Go files of the graph
			}
			alias := imp.Names[0].Alias
			g.AddEdge(u.Node, node, lang.Imports, alias)
			if alias == "" {
				alias = packageName(imp.Module)
			}
			if alias != "_" && alias != "." {
				imported[alias] = folder
			}
		}
		resolve := func(name string, recv string) (lang.NodeID, bool) {
			if method, ok := strings.CutPrefix(name, receiverCall); ok {
				n, ok := scope[dir][recv+"."+method]
				return n, ok
			}
			if pkg, member, ok := strings.Cut(name, "."); ok {
				folder, known := imported[pkg]
				if !known {
					return 0, false
				}
				n, ok := scope[folder][member]
				return n, ok
			}
			n, ok := scope[dir][name]
			return n, ok
		}
		// Every parsed definition, so that a second init's calls are its
		// node's too.
		linked := map[[2]lang.NodeID]bool{}
		for _, d := range u.Parsed.Defs {
			src, ok := g.Lookup(u.Path + ":" + d.QualName)
			if !ok {
				continue
			}
			switch d.Kind {
			case lang.KindClass:
				for _, base := range d.Bases {
					if dst, ok := resolve(base, ""); ok && g.Nodes[dst].Type == lang.Class && dst != src {
						g.AddEdge(src, dst, lang.Inherits, "")
					}
				}
			case lang.KindFunction:
				recv, _, _ := strings.Cut(d.QualName, ".")
				for _, c := range d.Calls {
					dst, ok := resolve(c.Name, recv)
					if !ok || linked[[2]lang.NodeID{src, dst}] || g.Nodes[dst].Type != lang.Function {
						continue
					}
					linked[[2]lang.NodeID{src, dst}] = true
					g.AddEdge(src, dst, lang.Invokes, "")
				}
			}
		}
	}
}

// folderID is the graph id of a folder: "/" for the repository root.
func folderID(folder string) string {
	if folder == "." || folder == "" {
		return "/"
	}
	return folder
}

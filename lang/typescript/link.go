package typescript

import (
	"path"
	"strings"

	"github.com/a2farm/a2farm/lang"
)

// Link adds the TypeScript and JavaScript edges: imports (file → file for
// every relative specifier of an import or export-from statement, a
// require() or an import(), resolved as TypeScript and Node do: the path
// itself, a .ts file for a .js one written, the extensions in turn, then
// an index file) and inherits (a class → the class it extends, a
// top-level class of its file or one it imports by name from a relative
// module). A bare specifier is resolved through the nearest tsconfig.json
// or jsconfig.json above the file (compilerOptions.paths, then baseUrl);
// one that names a package is not a repository file. A config's
// "extends" is not followed.
func (Language) Link(g *lang.Graph, units []lang.Unit) {
	configs := tsconfigs(g.Project)
	for _, u := range units {
		if !u.OK {
			continue
		}
		dir := path.Dir(u.Path)
		// Local names of classes imported by name, and the file each
		// comes from.
		importedFrom := map[string]struct {
			file lang.NodeID
			name string
		}{}
		linked := map[lang.NodeID]bool{}
		for _, imp := range u.Parsed.Imports {
			target, ok := resolve(g, configs, dir, imp.Module)
			if !ok {
				continue
			}
			if !linked[target] {
				linked[target] = true
				g.AddEdge(u.Node, target, lang.Imports, "")
			}
			for _, n := range imp.Names {
				local := n.Alias
				if local == "" {
					local = n.Name
				}
				if n.Name != "default" {
					importedFrom[local] = struct {
						file lang.NodeID
						name string
					}{target, n.Name}
				}
			}
		}
		for i, d := range u.Definitions {
			if d.Def.Kind != lang.KindClass {
				continue
			}
			for _, base := range d.Def.Bases {
				var dst lang.NodeID
				var ok bool
				if from, imported := importedFrom[base]; imported {
					dst, ok = g.Lookup(g.Nodes[from.file].ID + ":" + from.name)
				} else {
					dst, ok = g.Lookup(u.Path + ":" + base)
				}
				if ok && g.Nodes[dst].Type == lang.Class && dst != u.DefNodes[i] {
					g.AddEdge(u.DefNodes[i], dst, lang.Inherits, "")
				}
			}
		}
	}
}

// resolve finds the file a specifier names: a relative one from dir, a
// bare one through the nearest config's paths and baseUrl.
func resolve(g *lang.Graph, configs map[string]*tsconfig, dir, spec string) (lang.NodeID, bool) {
	if strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") || spec == "." || spec == ".." {
		return resolveFile(g, path.Clean(path.Join(dir, spec)))
	}
	c := nearest(configs, dir)
	if c == nil {
		return 0, false
	}
	for _, base := range c.candidates(spec) {
		if n, ok := resolveFile(g, base); ok {
			return n, true
		}
	}
	return 0, false
}

// resolveFile finds the file a path without its extension names, as
// TypeScript and Node do: the path itself, a .ts file for a .js one
// written, each extension in turn, then an index file.
func resolveFile(g *lang.Graph, base string) (lang.NodeID, bool) {
	var candidates []string
	candidates = append(candidates, base)
	for written, sources := range map[string][]string{".js": {".ts", ".tsx"}, ".jsx": {".tsx"}, ".mjs": {".mts"}, ".cjs": {".cts"}} {
		if stem, ok := strings.CutSuffix(base, written); ok {
			for _, s := range sources {
				candidates = append(candidates, stem+s)
			}
		}
	}
	for _, ext := range extensions {
		candidates = append(candidates, base+ext)
	}
	for _, ext := range extensions {
		candidates = append(candidates, base+"/index"+ext)
	}
	for _, c := range candidates {
		if n, ok := g.Lookup(c); ok && g.Nodes[n].Type == lang.FileNode {
			return n, true
		}
	}
	return 0, false
}

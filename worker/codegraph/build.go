package codegraph

import (
	"context"
	"path"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/lang"
)

// ParseAll parses every file of the snapshot, each with its own
// language's parser, one parser per language and CPU.
func ParseAll(ctx context.Context, langs *lang.Set, files []SourceFile) ([]*lang.File, error) {
	out := make([]*lang.File, len(files))
	next := make(chan int, len(files))
	for i := range files {
		next <- i
	}
	close(next)
	g, ctx := errgroup.WithContext(ctx)
	parseArriving(ctx, g, langs, files, out, next, min(runtime.GOMAXPROCS(0), max(1, len(files))))
	return out, g.Wait()
}

// parseArriving starts parsers in g, each parsing files[i] into parsed[i]
// with the language that reads it, for every index i that arrives on next,
// until next closes. A parser keeps one parser per language, made on first
// use.
func parseArriving(ctx context.Context, g *errgroup.Group, langs *lang.Set, files []SourceFile, parsed []*lang.File, next <-chan int, parsers int) {
	for range parsers {
		g.Go(func() error {
			own := map[lang.Language]lang.Parser{}
			defer func() {
				for _, p := range own {
					p.Close()
				}
			}()
			for i := range next {
				if err := ctx.Err(); err != nil {
					return err
				}
				l := langs.Reader(files[i].Path)
				if l == nil {
					continue // read by no language: a file node only
				}
				p, ok := own[l]
				if !ok {
					var err error
					if p, err = l.NewParser(); err != nil {
						return err
					}
					own[l] = p
				}
				var err error
				if parsed[i], err = p.Parse(files[i].Path, files[i].Content); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// BuildGraph builds the code graph of reference §B.1 from a snapshot's
// parsed files (parsed[i] belongs to src.Files[i]; files sorted by path),
// each file by the language that reads it; the languages link with the
// snapshot's project files at hand (Graph.Project, cleared after).
//
// Nodes: "/" and every directory holding source files (recursively), every
// source file, and the definitions each file's language lists (ids
// "path:Qual.Name"). A file whose parse its language does not trust keeps
// its node but gets no children and no contains edge. Contains edges link
// directory -> directory and file, file -> top-level definitions,
// definition -> nested ones. Then each language, in the set's order,
// links its own files: imports, invokes and inherits edges (lang.Language
// Link).
func BuildGraph(langs *lang.Set, src *Snapshot, parsedFiles []*lang.File) *Graph {
	b := &builder{
		g:      newGraph(langs, src.Files),
		parsed: parsedFiles,
		units:  map[lang.Language][]lang.Unit{},
	}
	b.g.parsed = parsedFiles
	b.addStructure()
	b.g.Project = src.Project
	for _, l := range langs.Languages() {
		if units := b.units[l]; len(units) > 0 {
			l.Link(&b.g.Graph, units)
		}
	}
	b.g.Project = nil
	return b.g
}

type builder struct {
	g      *Graph
	parsed []*lang.File
	// units are each language's files, in file (path) order.
	units map[lang.Language][]lang.Unit
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
	var walk func(d *dirTree, parent NodeID)
	walk = func(d *dirTree, parent NodeID) {
		dirNode := parent
		if d.name == "/" {
			dirNode = g.AddNode(Node{ID: "/", Type: Directory, FileIndex: -1})
		} else {
			dirNode = g.AddNode(Node{ID: d.name, Type: Directory, FileIndex: -1})
			g.AddEdge(parent, dirNode, Contains, "")
		}
		for _, fi := range d.files {
			b.addFile(fi, dirNode)
		}
		for _, sub := range d.dirs {
			walk(sub, dirNode)
		}
	}
	walk(b.tree(), 0)
	for _, units := range b.units {
		slices.SortFunc(units, func(x, y lang.Unit) int { return x.FileIndex - y.FileIndex })
	}
}

func (b *builder) addFile(fi int, dirNode NodeID) {
	g := b.g
	f := g.files[fi]
	pf := b.parsed[fi]
	lines := 0
	if pf != nil {
		lines = pf.Lines
	}
	fileNode := g.AddNode(Node{ID: f.Path, Type: File, StartLine: 1, EndLine: lines,
		FileIndex: int32(fi), StartByte: 0, EndByte: uint32(f.Len())})
	l := g.langs.Reader(f.Path)
	if l == nil {
		return
	}
	u := lang.Unit{Path: f.Path, FileIndex: fi, Node: fileNode, Parsed: pf}
	if pf != nil {
		u.Definitions, u.OK = l.Definitions(pf)
	}
	defer func() { b.units[l] = append(b.units[l], u) }()
	if !u.OK {
		return
	}
	u.DefNodes = make([]NodeID, len(u.Definitions))
	for i, d := range u.Definitions {
		t := Function
		if d.Def.Kind == lang.KindClass {
			t = Class
		}
		u.DefNodes[i] = g.AddNode(Node{ID: f.Path + ":" + d.Def.QualName, Type: t,
			StartLine: d.Def.Span.Start, EndLine: d.Def.Span.End,
			FileIndex: int32(fi), StartByte: d.Def.StartByte, EndByte: d.Def.EndByte})
	}
	g.AddEdge(dirNode, fileNode, Contains, "")
	for i, d := range u.Definitions {
		parent := fileNode
		if d.Parent != "" {
			parent, _ = g.Lookup(f.Path + ":" + d.Parent)
		}
		g.AddEdge(parent, u.DefNodes[i], Contains, "")
	}
}

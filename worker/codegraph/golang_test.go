package codegraph_test

import (
	"bytes"
	"testing"

	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/worker/codegraph"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// goFiles is a Go repository with a nested module, grouped types, generic
// and pointer receivers, methods declared away from their type, several
// init functions, embedding across packages and files a graph leaves out.
var goFiles = map[string]string{
	"go.mod": "module example.com/shop\n\ngo 1.22\n",
	"main.go": `package main

import (
	"fmt"

	"example.com/shop/store"
	inv "example.com/shop/store/inventory"
	"example.com/shop/tools/lint"
)

func main() {
	s := store.New()
	fmt.Println(s, inv.Count(), lint.Run())
	helper()
}

func helper() {}

func init() {}

func init() { helper() }
`,
	"store/store.go": `package store

import "example.com/shop/store/inventory"

type (
	// Store sells items.
	Store struct {
		*inventory.Stock
		Base
		name string
	}
	Base struct{ id int }
	ID   = int
)

type Reader interface {
	Lister
	Read() string
}

type Lister interface{ List() []string }

func New() *Store { return &Store{name: "shop"} }

func (s *Store) Name() string { return s.label() }

func (s Store) label() string { return s.name + inventory.Label() }
`,
	"store/more.go": `package store

// Close is declared away from its type.
func (s *Store) Close() error { s.Name(); return nil }

type Box[T any] struct{ items []T }

func (b *Box[T]) Add(x T) { b.items = append(b.items, x) }
`,
	"store/inventory/stock.go": `package inventory

type Stock struct{ n int }

func Count() int { return 3 }

func Label() string { return "inv" }
`,
	"store/store_test.go": `package store

import "testing"

func TestNew(t *testing.T) { New() }
`,
	"store/testdata/fixture.go":  "package fixture\n",
	"vendor/github.com/x/y/y.go": "package y\n",
	"tools/go.mod":               "module example.com/shop/tools\n",
	"tools/lint/lint.go":         "package lint\n\nfunc Run() bool { return true }\n",
}

func TestGoGraph(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(python.Language{}, golang.Language{}), goFiles)
	var buf bytes.Buffer
	if err := g.WriteJSONLines(&buf); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "go_graph.golden.jsonl", buf.Bytes())

	for _, id := range []string{"main.go:init", "store/store.go:Store", "store/store.go:Base", "store/store.go:ID",
		"store/store.go:Store.Name", "store/store.go:Store.label", "store/more.go:Store.Close", "store/more.go:Box.Add",
		"store/store_test.go:TestNew", "tools/lint/lint.go:Run"} {
		if _, ok := g.Lookup(id); !ok {
			t.Errorf("node %s missing", id)
		}
	}
	for _, id := range []string{"store/testdata/fixture.go", "vendor/github.com/x/y/y.go", "go.mod", "store/store.go:Close"} {
		if _, ok := g.Lookup(id); ok {
			t.Errorf("node %s exists; want it absent", id)
		}
	}
	edges := edgeSet(g)
	for _, want := range []string{
		"store/store.go:Store contains store/store.go:Store.Name", // a method in its type's file
		"store/more.go contains store/more.go:Store.Close",        // one declared away from it
		"main.go imports store",
		"main.go imports store/inventory",
		"main.go imports tools/lint", // through the nested module
		"store/store.go:Store inherits store/inventory/stock.go:Stock",
		"store/store.go:Store inherits store/store.go:Base",
		"store/store.go:Reader inherits store/store.go:Lister",
		"main.go:main invokes store/store.go:New",
		"main.go:main invokes store/inventory/stock.go:Count",
		"main.go:main invokes tools/lint/lint.go:Run",
		"main.go:main invokes main.go:helper",
		"main.go:init invokes main.go:helper", // the second init is the node's too
		"store/store.go:Store.Name invokes store/store.go:Store.label",
		"store/more.go:Store.Close invokes store/store.go:Store.Name",
		"store/store.go:Store.label invokes store/inventory/stock.go:Label",
	} {
		if !edges[want] {
			t.Errorf("edge missing: %s", want)
		}
	}
	for _, unwanted := range []string{"main.go imports fmt", "store/store.go:Store inherits store/store.go:Store"} {
		if edges[unwanted] {
			t.Errorf("edge present: %s", unwanted)
		}
	}
}

// edgeSet is every edge of g as "src type dst".
func edgeSet(g *codegraph.Graph) map[string]bool {
	edges := map[string]bool{}
	for _, e := range g.Edges {
		edges[g.Node(e.Src).ID+" "+e.Type.String()+" "+g.Node(e.Dst).ID] = true
	}
	return edges
}

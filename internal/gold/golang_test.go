package gold

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/python"
)

const storeGo = `package store

import (
	"fmt"
	"strings"
)

// limit caps a basket.
const limit = 10

var registry = map[string]int{}

type (
	// Item is one thing for sale.
	Item struct {
		Name  string
		Price int
	}
	Basket []Item
)

// Total sums the basket.
func (b Basket) Total() int {
	sum := 0
	for _, it := range b {
		sum += it.Price
	}
	return sum
}

func (b *Basket) Add(it Item) error {
	if len(*b) >= limit {
		return fmt.Errorf("full")
	}
	*b = append(*b, it)
	return nil
}

func Label(it Item) string {
	clean := func(s string) string {
		return strings.TrimSpace(s)
	}
	return clean(it.Name)
}

func init() { registry["a"] = 1 }

func init() { registry["b"] = 2 }
`

// TestGoGoldGolden: the Go rule on generated repositories, one case per
// rule — a method, a type spec in a group, a closure inside a function,
// an import, a var or const, a comment, an added method and type, a
// second init, a new file, tests and testdata left out, and a patch that
// edits a Python file beside a Go one.
func TestGoGoldGolden(t *testing.T) {
	cases := []goldCase{
		{"a method body", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.Replace(storeGo, "sum += it.Price", "sum += it.Price * 2", 1)}},
		{"a pointer-receiver method", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.Replace(storeGo, `fmt.Errorf("full")`, `fmt.Errorf("basket full")`, 1)}},
		{"a field of a grouped type", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.Replace(storeGo, "Price int\n", "Price int\n\t\tSKU   string\n", 1)}},
		{"a closure inside a function", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.Replace(storeGo, "strings.TrimSpace(s)", "strings.ToLower(strings.TrimSpace(s))", 1)}},
		{"an import, a const and a var", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.NewReplacer(`"strings"`, `"strings"`+"\n\t\"sort\"", "limit = 10", "limit = 12",
				"map[string]int{}", "map[string]int{\"x\": 0}").Replace(storeGo)}},
		{"a comment inside a method", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.Replace(storeGo, "\tsum := 0\n", "\t// start from nothing\n\tsum := 0\n", 1)}},
		{"an added method and type", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": storeGo + "\ntype Coupon struct{ Off int }\n\nfunc (b Basket) Empty() bool { return len(b) == 0 }\n"}},
		{"the second init", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/store.go": strings.Replace(storeGo, `registry["b"] = 2`, `registry["b"] = 3`, 1)}},
		{"a new file", map[string]string{"store/store.go": storeGo},
			map[string]string{"store/coupon.go": "package store\n\ntype Coupon struct{ Off int }\n\nfunc Apply(c Coupon) int { return c.Off }\n"}},
		{"tests and testdata are never gold", map[string]string{"store/store.go": storeGo, "store/store_test.go": "package store\n\nfunc helper() {}\n"},
			map[string]string{"store/store.go": strings.Replace(storeGo, "return sum", "return sum + 0", 1),
				"store/store_test.go": "package store\n\nfunc helper() { _ = 1 }\n", "store/testdata/case.go": "package testdata\n"}},
		{"a Go file beside a Python one", map[string]string{"store/store.go": storeGo, "tools/gen.py": "def gen():\n    return 1\n"},
			map[string]string{"store/store.go": strings.Replace(storeGo, "return clean(it.Name)", "return clean(it.Name) + \"!\"", 1),
				"tools/gen.py": "def gen():\n    return 2\n"}},
	}
	checkGoldCases(t, newExtractor(t, Options{Languages: lang.NewSet(python.Language{}, golang.Language{})}), cases, "go_gold.golden.jsonl")
}

// goldCase is a repository before and after a fix.
type goldCase struct {
	name      string
	base, fix map[string]string
}

// checkGoldCases extracts the gold of each case's fix and compares the
// rows, one a case, with a golden file.
func checkGoldCases(t *testing.T, ex *Extractor, cases []goldCase, goldenName string) {
	t.Helper()
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	for _, c := range cases {
		inst, src := fixture(t, c.base, c.fix)
		res, err := ex.Extract(inst, src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.NullReason != "" {
			t.Fatalf("%s: null gold: %s", c.name, res.NullReason)
		}
		if err := enc.Encode(map[string]any{"case": c.name, "file_changes": res.Gold.FileChanges}); err != nil {
			t.Fatal(err)
		}
	}
	golden.Check(t, goldenName, out.Bytes())
}

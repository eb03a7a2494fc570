// Package sample builds the built-in demo: a real git repository of a small
// Python package with a few commits, and a dataset of issues whose gold
// patches edit methods, nested functions, top-level functions, class
// bodies, decorators, module-level code, and add and delete files. `a2farm
// sample` writes it; `make run` and the tests use it.
package sample

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/repogen"
	"github.com/a2farm/a2farm/schema"
)

// Repo is the dataset name of the sample repository.
const Repo = "acme/inventory"

// Layout says where a written sample lives.
type Layout struct {
	Dir      string // the folder passed to Write
	ReposDir string // Dir/repos, holding acme__inventory (bare)
	Dataset  string // Dir/dataset.jsonl
	// Instances are the dataset rows, in file order.
	Instances []schema.Instance
}

// edit is one textual replacement in a file of the base commit.
type edit struct {
	path, old, new string
}

// issue is a dataset row before its patch is computed.
type issue struct {
	number    int
	statement string
	edits     []edit
	write     map[string]string
	delete    []string
}

func issues() []issue {
	return []issue{
		{
			number: 1,
			statement: `Warehouse.remove_item raises a bare KeyError for unknown SKUs

Calling ` + "`Warehouse.remove_item(\"nope\")`" + ` on a warehouse that does not stock the SKU
fails with ` + "`KeyError: 'nope'`" + ` from inside models.py. The errors module defines
UnknownItem for exactly this case; remove_item should raise it so callers can catch
inventory errors uniformly.`,
			edits: []edit{{"inventory/models.py",
				"        item = self._items[sku]\n        if item.quantity < amount:",
				"        item = self._items.get(sku)\n        if item is None:\n            raise UnknownItem(sku)\n        if item.quantity < amount:"}},
		},
		{
			number: 2,
			statement: `compute_discount ignores rule priority and the min_quantity boundary

A PriceRule(min_quantity=10, percent=5) does not apply to an order of exactly 10 units,
although the docstring says "at least min_quantity". Also, when several rules match,
compute_discount picks the cheapest price instead of the rule with the highest priority.`,
			edits: []edit{
				{"inventory/pricing.py", "return quantity > self.min_quantity", "return quantity >= self.min_quantity"},
				{"inventory/pricing.py",
					"    best = price\n    for rule in rules:\n        if rule.matches(quantity):\n            best = min(best, rule.apply(price))\n    return best",
					"    matching = [rule for rule in rules if rule.matches(quantity)]\n    if not matching:\n        return price\n    best = max(matching, key=lambda rule: rule.priority)\n    return best.apply(price)"},
			},
		},
		{
			number: 3,
			statement: `Warehouse.find is case sensitive

` + "`warehouse.find(\"apple\")`" + ` does not return an item named "Green Apple". Searching
should ignore case.`,
			edits: []edit{{"inventory/models.py",
				"            return query in item.name",
				"            return query.lower() in item.name.lower()"}},
		},
		{
			number: 4,
			statement: `apply_tax uses the wrong default rate

The default tax rate in the pricing module is 20%, but the service now bills at 21%.
apply_tax(100) should return 121.0.`,
			edits: []edit{{"inventory/pricing.py", "DEFAULT_TAX_RATE = 0.2\n", "DEFAULT_TAX_RATE = 0.21\n"}},
		},
		{
			number: 5,
			statement: `Loading from a closed backend does not fail

After JsonFileBackend.close(), save() raises RuntimeError but load() still returns data.
The _require_open guard should also name the backend class in its message, and closed
backends should refuse every operation.`,
			edits: []edit{
				{"inventory/storage/backends.py", `            raise RuntimeError("backend is closed")`,
					`            raise RuntimeError(f"{type(self).__name__} is closed")`},
				{"inventory/storage/backends.py", "    closed = False\n", "    closed: bool = False\n"},
				{"inventory/storage/backends.py", "    @_require_open\n    def load(self, key):", "    @_require_open  # also guards reads\n    def load(self, key):"},
			},
		},
		{
			number: 6,
			statement: `Remove the legacy helpers and make slugify keep unicode letters

inventory/legacy.py is dead code since 0.3. Also ` + "`slugify(\"Café Crème\")`" + ` returns
"caf-cr-me": slugify drops accented letters. Move slug handling to a dedicated
inventory/utils/slug.py module and have text.slugify delegate to it.`,
			delete: []string{"inventory/legacy.py"},
			write: map[string]string{"inventory/utils/slug.py": `"""Unicode-aware slugs."""
import unicodedata


def to_ascii(text):
    normalized = unicodedata.normalize("NFKD", text)
    return normalized.encode("ascii", "ignore").decode("ascii")


def make_slug(text):
    return "-".join(to_ascii(text).lower().split())
`},
			edits: []edit{{"inventory/utils/text.py",
				`    return _SLUG_STRIP.sub("-", text.lower()).strip("-")`,
				"    from .slug import make_slug\n\n    return _SLUG_STRIP.sub(\"-\", make_slug(text)).strip(\"-\")"}},
		},
	}
}

// Write builds the sample under dir (which must not exist yet, or be
// empty) and returns its layout.
func Write(dir string) (*Layout, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("sample: %s is not empty", dir)
	}
	l := &Layout{
		Dir:      dir,
		ReposDir: filepath.Join(dir, "repos"),
		Dataset:  filepath.Join(dir, "dataset.jsonl"),
	}
	repo, err := repogen.Init(filepath.Join(l.ReposDir, gitrepo.DirName(Repo)))
	if err != nil {
		return nil, err
	}
	history := []repogen.Change{
		{Message: "Initial import of the inventory package", Write: map[string]string{
			"README.md": readme, "setup.py": setupPy,
			"inventory/__init__.py": initPy, "inventory/errors.py": errorsPy,
			"inventory/models.py": modelsPy, "inventory/pricing.py": pricingPy,
			"inventory/legacy.py":  legacyPy,
			"tests/test_models.py": testModelsPy, "tests/test_pricing.py": testPricingPy,
		}},
		{Message: "Add text utilities and the report command", Write: map[string]string{
			"inventory/utils/__init__.py": "", "inventory/utils/text.py": textPy, "inventory/cli.py": cliPy,
		}},
		{Message: "Add storage backends\n\nMemoryBackend keeps snapshots in memory; JsonFileBackend writes them\nto disk on flush. Both refuse writes once closed.\n\nRefs #12, closes #7", Write: map[string]string{
			"inventory/storage/__init__.py": storageInitPy, "inventory/storage/backends.py": backendsPy,
		}},
	}
	head := ""
	for _, ch := range history {
		if head, err = repo.Commit(head, ch); err != nil {
			return nil, err
		}
	}
	base := head
	for _, is := range issues() {
		inst, err := is.instance(repo, base)
		if err != nil {
			return nil, err
		}
		l.Instances = append(l.Instances, inst)
	}
	// Work continues on main after the issues were filed, as in real repos.
	head, err = repo.Commit(base, repogen.Change{Message: "Release 0.3.1", Write: map[string]string{
		"README.md": readme + "\nRelease 0.3.1.\n",
	}})
	if err != nil {
		return nil, err
	}
	if err := repo.SetBranch("main", head); err != nil {
		return nil, err
	}
	if err := writeDataset(l.Dataset, l.Instances); err != nil {
		return nil, err
	}
	return l, nil
}

// instance commits the fix on a side branch from base and returns the
// dataset row whose patch is the diff base..fix.
func (is issue) instance(repo *repogen.Repo, base string) (schema.Instance, error) {
	files := repo.Files(base)
	write := map[string]string{}
	for p, content := range is.write {
		write[p] = content
	}
	for _, e := range is.edits {
		content, ok := write[e.path]
		if !ok {
			content, ok = files[e.path]
		}
		if !ok || !strings.Contains(content, e.old) {
			return schema.Instance{}, fmt.Errorf("sample issue %d: %q not found in %s", is.number, e.old, e.path)
		}
		write[e.path] = strings.Replace(content, e.old, e.new, 1)
	}
	title, _, _ := strings.Cut(is.statement, "\n")
	fix, err := repo.Commit(base, repogen.Change{Message: "Fix: " + title, Write: write, Delete: is.delete})
	if err != nil {
		return schema.Instance{}, err
	}
	patch, err := repo.Diff(base, fix)
	if err != nil {
		return schema.Instance{}, err
	}
	return schema.Instance{
		InstanceID:       fmt.Sprintf("%s-%d", gitrepo.DirName(Repo), is.number),
		Repo:             Repo,
		BaseCommit:       base,
		ProblemStatement: is.statement + "\n",
		Patch:            patch,
	}, nil
}

func writeDataset(path string, rows []schema.Instance) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

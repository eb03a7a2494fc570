package agent

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/sample"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/codegraph"
)

var sampleGraph = sync.OnceValues(func() (*codegraph.Graph, error) {
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	l, err := sample.Write(dir)
	if err != nil {
		return nil, err
	}
	repos := gitrepo.NewSet(l.ReposDir)
	defer repos.Close()
	snap, err := repos.At(sample.Repo, "main")
	if err != nil {
		return nil, err
	}
	src, err := codegraph.LoadSnapshot(context.Background(), lang.NewSet(python.Language{}), sample.Repo, snap)
	if err != nil {
		return nil, err
	}
	parsed, err := codegraph.ParseAll(context.Background(), lang.NewSet(python.Language{}), src.Files)
	if err != nil {
		return nil, err
	}
	return codegraph.BuildGraph(lang.NewSet(python.Language{}), src, parsed), nil
})

func TestParseAnswer(t *testing.T) {
	g, err := sampleGraph()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		raw  string
		want schema.Locations
	}{
		{
			name: "the requested format",
			raw: "After exploring:\n```\ninventory/models.py\nclass: Warehouse\nfunction: Warehouse.remove_item\n\n" +
				"inventory/pricing.py\nfunction: compute_discount\nline: 15\n```\n",
			want: schema.Locations{
				Files:    []string{"inventory/models.py", "inventory/pricing.py"},
				Modules:  []string{"inventory/models.py:Warehouse", "inventory/pricing.py:compute_discount", "inventory/pricing.py:PriceRule"},
				Entities: []string{"inventory/models.py:Warehouse.remove_item", "inventory/pricing.py:compute_discount", "inventory/pricing.py:PriceRule.matches"},
			},
		},
		{
			name: "method named after a class line; nested function by line number",
			raw:  "```\ninventory/models.py\nclass: Warehouse\nfunction: find\nlines: 46\n```",
			want: schema.Locations{
				Files:    []string{"inventory/models.py"},
				Modules:  []string{"inventory/models.py:Warehouse", "inventory/models.py:Warehouse.find"},
				Entities: []string{"inventory/models.py:Warehouse.find", "inventory/models.py:Warehouse.find.matches"},
			},
		},
		{
			name: "last block with a path wins; code blocks are skipped",
			raw: "```\ninventory/cli.py\nfunction: main\n```\nthen\n```python\ndef f(): pass  # inventory/x.py\n```\n" +
				"final:\n```\ninventory/errors.py\nclass: OutOfStock\n```",
			want: schema.Locations{Files: []string{"inventory/errors.py"}},
		},
		{
			name: "root-level file, numbered and absolute paths",
			raw:  "```\n1. /home/u/repo/inventory/legacy.py\nfunction: old_slug()\nsetup.py\n```",
			want: schema.Locations{
				Files:    []string{"inventory/legacy.py", "setup.py"},
				Modules:  []string{"inventory/legacy.py:old_slug"},
				Entities: []string{"inventory/legacy.py:old_slug"},
			},
		},
		{
			name: "line numbers only map to the named file",
			raw:  "```\ninventory/utils/text.py\nline: 8\nline: 500\n```",
			want: schema.Locations{
				Files:    []string{"inventory/utils/text.py"},
				Modules:  []string{"inventory/utils/text.py:slugify", "inventory/utils/text.py:parse_quantity"},
				Entities: []string{"inventory/utils/text.py:slugify", "inventory/utils/text.py:parse_quantity"},
			},
		},
		{
			name: "test files and unknown files are dropped; fallback scans the whole text",
			raw:  "I think the bug is in inventory/pricing.py (and tests/test_pricing.py), maybe inventory/nope.py.",
			want: schema.Locations{Files: []string{"inventory/pricing.py"}},
		},
		{
			name: "entities named most often rank first",
			raw:  "```\ninventory/pricing.py\nfunction: apply_tax\nfunction: PriceRule.apply\nmethod: PriceRule.apply\n```",
			want: schema.Locations{
				Files:    []string{"inventory/pricing.py"},
				Modules:  []string{"inventory/pricing.py:PriceRule", "inventory/pricing.py:apply_tax"},
				Entities: []string{"inventory/pricing.py:PriceRule.apply", "inventory/pricing.py:apply_tax"},
			},
		},
		{name: "empty", raw: "", want: schema.Locations{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseAnswer(tt.raw, g); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseAnswer:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

package gold

import (
	"strings"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/java"
)

const cartJava = `package com.acme.shop;

import java.util.ArrayList;
import java.util.List;

/**
 * A cart of items.
 */
@SuppressWarnings("unused")
public class Cart implements Iterable<Item> {
  private static final int LIMIT = 10;
  private final List<Item> items = new ArrayList<>();

  static {
    System.loadLibrary("cart");
  }

  public Cart() {
    this(LIMIT);
  }

  public Cart(int limit) {
    items.clear();
  }

  public int total() {
    int sum = 0;
    for (Item it : items) {
      sum += it.price();
    }
    return sum;
  }

  @Override
  public java.util.Iterator<Item> iterator() {
    return items.iterator();
  }

  public static final class Line {
    int qty;

    int cost(Item it) {
      return it.price() * qty;
    }
  }

  enum Mode {
    FAST, SLOW;

    boolean quick() {
      return this == FAST;
    }
  }
}
`

// TestJavaGoldGolden: the rule on generated repositories — a method, a
// constructor among overloads, a method's annotation, a field, a static
// initializer, the declaration line, a nested type's method and field,
// an enum constant and an enum's method, package and import lines,
// comment lines, an added method and type, a new file, and tests left
// out.
func TestJavaGoldGolden(t *testing.T) {
	const path = "shop/src/main/java/com/acme/shop/Cart.java"
	base := map[string]string{path: cartJava}
	edit := func(pairs ...string) map[string]string {
		return map[string]string{path: strings.NewReplacer(pairs...).Replace(cartJava)}
	}
	cases := []goldCase{
		{"a method", base, edit("sum += it.price();", "sum += it.price() * 2;")},
		{"a constructor among overloads", base, edit("items.clear();", "items.clear();\n    assert limit > 0;")},
		{"a method's annotation", base, edit("  @Override\n  public java.util.Iterator", "  @Override @Deprecated\n  public java.util.Iterator")},
		{"a field", base, edit("LIMIT = 10;", "LIMIT = 20;")},
		{"a static initializer", base, edit(`System.loadLibrary("cart");`, `System.loadLibrary("shop");`)},
		{"the declaration line", base, edit("implements Iterable<Item>", "implements Iterable<Item>, java.io.Serializable")},
		{"a nested type's method and field", base, edit("return it.price() * qty;", "return it.price() * Math.max(qty, 1);", "    int qty;", "    long qty;")},
		{"an enum constant and an enum's method", base, edit("FAST, SLOW;", "FAST, SLOW, OFF;", "return this == FAST;", "return this != SLOW;")},
		{"package and import lines", base, edit("import java.util.List;", "import java.util.List;\nimport java.util.Map;")},
		{"comment lines", base, edit(" * A cart of items.", " * A cart of items, in order.", "  public int total() {", "  // Sums the prices.\n  /* overflow ignored */\n  public int total() {")},
		{"an added method and type", base, edit("  public static final class Line {", "  public void empty() {\n    items.clear();\n  }\n\n  public static final class Line {",
			"  enum Mode {", "  record Wish(String name) {}\n\n  enum Mode {")},
		{"a new file", base, map[string]string{"shop/src/main/java/com/acme/shop/Item.java": "package com.acme.shop;\n\npublic record Item(String name, int price) {\n  public Item {\n    if (price < 0) throw new IllegalArgumentException();\n  }\n}\n"}},
		{"tests are never gold", map[string]string{path: cartJava, "shop/src/test/java/com/acme/shop/CartCheck.java": "class CartCheck {}\n",
			"shop/src/main/java/com/acme/shop/CartTest.java": "class CartTest {}\n", "shop/src/main/java/com/acme/shop/CartIT.java": "class CartIT {}\n"},
			map[string]string{path: strings.Replace(cartJava, "return sum;", "return sum + 0;", 1), "shop/src/test/java/com/acme/shop/CartCheck.java": "class CartCheck { }\n",
				"shop/src/main/java/com/acme/shop/CartTest.java": "class CartTest { }\n", "shop/src/main/java/com/acme/shop/CartIT.java": "class CartIT { }\n"}},
	}
	checkGoldCases(t, newExtractor(t, Options{Languages: lang.NewSet(java.Language{})}), cases, "java_gold.golden.jsonl")
}

package gold

import (
	"strings"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/typescript"
)

const cartTS = `import { Item } from "./item";

// A cart of items.
export interface Line { item: Item; qty: number }

export default class Cart {
  private lines: Line[] = [];
  label = "cart";

  constructor(public owner: string) {}

  get size(): number {
    return this.lines.length;
  }

  add(item: Item, qty = 1): void {
    this.lines.push({ item, qty });
  }

  onChange = () => {
    console.log("changed");
  };
}

export function total(c: Cart): number {
  const sum = (a: number, b: number) => a + b;
  return c.size + sum(0, 0);
}

export const empty = (c: Cart) => c.size === 0;

export enum Mode { Fast, Slow }
`

// TestTypeScriptGoldGolden: the rule on generated repositories — a
// method, a getter, a function-valued property, a class field, a nested
// arrow inside a function, an arrow-function const, an interface, an
// enum, an import, comment lines, an added method and class, a new
// JavaScript file, and test files left out.
func TestTypeScriptGoldGolden(t *testing.T) {
	cases := []goldCase{
		{"a method", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, "this.lines.push({ item, qty });", "this.lines.push({ item, qty: Math.max(qty, 1) });", 1)}},
		{"a getter", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, "return this.lines.length;", "return this.lines.reduce((n, l) => n + l.qty, 0);", 1)}},
		{"a function-valued property", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, `console.log("changed");`, `console.info("changed");`, 1)}},
		{"a class field", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, `label = "cart";`, `label = "basket";`, 1)}},
		{"an arrow inside a function", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, "a + b;", "a + b + 0;", 1)}},
		{"an arrow-function const", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, "c.size === 0", "c.size <= 0", 1)}},
		{"an interface, an enum and an import", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.NewReplacer(
			"qty: number }", "qty: number; note?: string }", "Fast, Slow", "Fast, Slow, Off", `import { Item } from "./item";`, `import { Item } from "./item.js";`).Replace(cartTS)}},
		{"comment lines", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, "  add(item", "  // Adds an item.\n  /* qty defaults to 1 */\n  add(item", 1)}},
		{"an added method and class", map[string]string{"src/cart.ts": cartTS}, map[string]string{"src/cart.ts": strings.Replace(cartTS, "  onChange", "  clear(): void {\n    this.lines = [];\n  }\n\n  onChange", 1) + "\nexport class Wish {}\n"}},
		{"a new JavaScript file", map[string]string{"src/cart.ts": cartTS}, map[string]string{"lib/fmt.js": "class Fmt {\n  money(x) { return x.toFixed(2); }\n}\nfunction pad(s) { return s; }\nmodule.exports = { Fmt, pad };\n"}},
		{"test files are never gold", map[string]string{"src/cart.ts": cartTS, "src/cart.test.ts": "test(\"x\", () => {});\n", "__tests__/a.js": "x();\n"},
			map[string]string{"src/cart.ts": strings.Replace(cartTS, "c.size + sum(0, 0)", "c.size + sum(0, 1)", 1), "src/cart.test.ts": "test(\"y\", () => {});\n", "__tests__/a.js": "y();\n"}},
	}
	checkGoldCases(t, newExtractor(t, Options{Languages: lang.NewSet(typescript.Language{})}), cases, "typescript_gold.golden.jsonl")
}

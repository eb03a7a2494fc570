package codegraph_test

import (
	"bytes"
	"testing"

	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/typescript"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// tsFiles is a TypeScript and JavaScript repository: exported, default
// and abstract classes, accessors, function-valued properties, arrow
// functions, relative imports written every way Node and TypeScript
// resolve them, and files a graph leaves out.
var tsFiles = map[string]string{
	"src/shapes/base.ts": `export abstract class Shape {
  abstract area(): number;
  describe(): string { return "shape"; }
}
export class Named extends Shape { area() { return 0; } }
`,
	"src/shapes/circle.ts": `import { Shape as Base, Named } from "./base";
import type { Opts } from "../types";

export default class Circle extends Base {
  r = 1;
  onClick = () => this.r++;
  constructor(r: number) { super(); this.r = r; }
  get radius() { return this.r; }
  set radius(v) { this.r = v; }
  area(): number { return Math.PI * this.r ** 2; }
  #secret() {}
}

class Ring extends Named {}

export function unit(): Circle { return new Circle(1); }
export const scale = (c: Circle, k: number) => c.r * k;
const plain = 3;
`,
	"src/shapes/index.ts": `export { default as Circle } from "./circle";
export * from "./base";
`,
	"src/types.ts":  "export interface Opts { fill: string }\nexport type ID = number;\nexport enum Color { Red }\n",
	"src/app.tsx":   "import { Circle } from \"./shapes\";\nimport { helper } from \"./util.js\";\nexport function App() { return <div>{helper()}</div>; }\n",
	"src/util.ts":   "export function helper() { return 1; }\n",
	"lib/legacy.js": "const base = require(\"../src/util\");\nclass Old extends Array {}\nmodule.exports = function load() { return import(\"./lazy.mjs\"); };\nvar run = function () {};\n",
	"lib/lazy.mjs":  "export async function* lazy() {}\n",
	// Bare specifiers through tsconfig paths and baseUrl (comments and
	// trailing commas allowed); lib/ has a config of its own.
	"tsconfig.json": `{
  // the app's paths
  "compilerOptions": {
    "baseUrl": ".", /* specifiers without a pattern start here */
    "paths": {
      "@shapes/*": ["src/shapes/*"],
      "@util": ["src/util.ts"],
    },
  },
}
`,
	"src/main.ts":                    "import { unit } from \"@shapes/circle\";\nimport { helper } from \"@util\";\nimport type { ID } from \"src/types\";\nimport React from \"react\";\n",
	"lib/jsconfig.json":              `{"compilerOptions": {"baseUrl": "..", "paths": {"~/*": ["src/*"]}}}`,
	"lib/paths.js":                   "const u = require(\"~/util\");\n",
	"src/shapes/circle.test.ts":      "import { unit } from \"./circle\";\ntest(\"unit\", () => unit());\n",
	"src/types.d.ts":                 "declare const x: number;\n",
	"dist/bundle.js":                 "function bundled() {}\n",
	"node_modules/left-pad/index.js": "function pad() {}\n",
	"public/app.min.js":              "function m(){}\n",
}

func TestTypeScriptGraph(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(typescript.Language{}), tsFiles)
	var buf bytes.Buffer
	if err := g.WriteJSONLines(&buf); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "typescript_graph.golden.jsonl", buf.Bytes())

	for _, id := range []string{"src/shapes/base.ts:Shape", "src/shapes/base.ts:Shape.describe", "src/shapes/circle.ts:Circle",
		"src/shapes/circle.ts:Circle.constructor", "src/shapes/circle.ts:Circle.radius", "src/shapes/circle.ts:Circle.onClick",
		"src/shapes/circle.ts:Circle.area", "src/shapes/circle.ts:Circle.#secret", "src/shapes/circle.ts:unit",
		"src/shapes/circle.ts:scale", "src/app.tsx:App", "lib/legacy.js:Old", "lib/legacy.js:run", "lib/lazy.mjs:lazy",
		"src/shapes/circle.test.ts"} {
		if _, ok := g.Lookup(id); !ok {
			t.Errorf("node %s missing", id)
		}
	}
	for _, id := range []string{"src/shapes/circle.ts:plain", "src/shapes/circle.ts:Circle.r", "src/types.d.ts", "dist/bundle.js",
		"node_modules/left-pad/index.js", "public/app.min.js", "src/types.ts:Opts"} {
		if _, ok := g.Lookup(id); ok {
			t.Errorf("node %s exists; want it absent", id)
		}
	}
	edges := edgeSet(g)
	for _, want := range []string{
		"src/shapes/circle.ts contains src/shapes/circle.ts:Circle",
		"src/shapes/circle.ts:Circle contains src/shapes/circle.ts:Circle.radius",
		"src/shapes/circle.ts imports src/shapes/base.ts",
		"src/shapes/circle.ts imports src/types.ts",                     // import type, up a folder
		"src/shapes/index.ts imports src/shapes/circle.ts",              // export ... from
		"src/app.tsx imports src/shapes/index.ts",                       // a folder's index
		"src/app.tsx imports src/util.ts",                               // ".js" written for a .ts file
		"lib/legacy.js imports src/util.ts",                             // require()
		"lib/legacy.js imports lib/lazy.mjs",                            // import()
		"src/main.ts imports src/shapes/circle.ts",                      // a paths pattern
		"src/main.ts imports src/util.ts",                               // an exact paths entry
		"src/main.ts imports src/types.ts",                              // baseUrl
		"lib/paths.js imports src/util.ts",                              // the nearest config: lib/jsconfig.json
		"src/shapes/circle.ts:Circle inherits src/shapes/base.ts:Shape", // through an alias
		"src/shapes/circle.ts:Ring inherits src/shapes/base.ts:Named",
		"src/shapes/base.ts:Named inherits src/shapes/base.ts:Shape", // in its own file
	} {
		if !edges[want] {
			t.Errorf("edge missing: %s", want)
		}
	}
}

package typescript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/needs"
)

// typescriptVersion is the TypeScript compiler the parity test reads
// files with: a second, independent parser.
const typescriptVersion = "5.6.3"

// compilerView prints, for each file named on its command line, the
// top-level classes with their methods, constructors, accessors (one a
// name) and function-valued properties, and the top-level functions
// (with a body; overload signatures right before start its span) and
// function-valued variables, as "kind id start-end" lines, the way the
// TypeScript compiler's own AST sees them.
const compilerView = `
const ts = require("typescript");
const fs = require("fs");
for (const file of process.argv.slice(2)) {
  const text = fs.readFileSync(file, "utf8");
  const kind = /\.tsx$/.test(file) ? ts.ScriptKind.TSX : /\.(jsx?|mjs|cjs)$/.test(file) ? ts.ScriptKind.JSX : ts.ScriptKind.TS;
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const line = (pos) => sf.getLineAndCharacterOfPosition(pos).line + 1;
  const span = (n) => line(n.getStart(sf)) + "-" + line(n.getEnd());
  const isFn = (n) => n && (ts.isArrowFunction(n) || ts.isFunctionExpression(n));
  const out = [];
  let pending = null;
  for (const st of sf.statements) {
    const last = pending;
    pending = null;
    if (ts.isFunctionDeclaration(st) && st.name && !st.body) {
      pending = last && last.name === st.name.text ? last : { name: st.name.text, start: line(st.getStart(sf)) };
      continue;
    }
    if (ts.isClassDeclaration(st) && st.name) {
      out.push("class " + st.name.text + " " + span(st));
      const seen = new Set();
      for (const m of st.members) {
        let name;
        if (ts.isConstructorDeclaration(m)) name = "constructor";
        else if ((ts.isMethodDeclaration(m) && m.body) || ts.isGetAccessor(m) || ts.isSetAccessor(m)) name = m.name.getText(sf);
        else if (ts.isPropertyDeclaration(m) && isFn(m.initializer)) name = m.name.getText(sf);
        if (!name || seen.has(name)) continue;
        seen.add(name);
        out.push("function " + st.name.text + "." + name + " " + span(m));
      }
    } else if (ts.isFunctionDeclaration(st) && st.name) {
      const start = last && last.name === st.name.text ? last.start : line(st.getStart(sf));
      out.push("function " + st.name.text + " " + start + "-" + line(st.getEnd()));
    } else if (ts.isVariableStatement(st)) {
      for (const d of st.declarationList.declarations) {
        if (ts.isIdentifier(d.name) && isFn(d.initializer)) out.push("function " + d.name.text + " " + span(d));
      }
    }
  }
  console.log(JSON.stringify({ file, defs: out }));
}
`

// TestAgreesWithTheTypeScriptCompiler reads TypeScript, TSX and
// JavaScript files with this package and with the TypeScript compiler
// and compares every definition: kind, id and line span. It reads
// testdata/ and, when A2FARM_TS_DIR names a checkout, every file of it
// the language reads. It needs node and npm (the compiler is installed
// into the user's cache once) and skips, saying so, without them.
func TestAgreesWithTheTypeScriptCompiler(t *testing.T) {
	prefix, node := needs.NPMPackage(t, "typescript@"+typescriptVersion)
	var files []string
	for _, dir := range []string{"testdata", os.Getenv("A2FARM_TS_DIR")} {
		if dir == "" {
			continue
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			if (Language{}).Reads(filepath.ToSlash(rel)) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(t.TempDir(), "view.js")
	if err := os.WriteFile(script, []byte(compilerView), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for batch := range slices.Chunk(files, 200) {
		cmd := exec.Command(node, append([]string{script}, batch...)...)
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(prefix, "node_modules"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the TypeScript compiler: %v\n%s", err, stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			file, defs := parseView(t, line)
			want[file] = defs
		}
	}
	p, err := newParser()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defs := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.Parse(file, src)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range f.Defs {
			got = append(got, fmt.Sprintf("%s %s %d-%d", d.Kind, d.QualName, d.Span.Start, d.Span.End))
			for _, m := range d.Children {
				got = append(got, fmt.Sprintf("%s %s %d-%d", m.Kind, m.QualName, m.Span.Start, m.Span.End))
			}
		}
		if !slices.Equal(got, want[file]) {
			t.Errorf("%s:\n tree-sitter %v\n tsc         %v", file, got, want[file])
		}
		defs += len(got)
	}
	t.Logf("%d files, %d definitions compared with typescript@%s", len(files), defs, typescriptVersion)
}

// parseView reads one line of the compiler's view.
func parseView(t *testing.T, line string) (string, []string) {
	t.Helper()
	var v struct {
		File string   `json:"file"`
		Defs []string `json:"defs"`
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("the compiler's view %q: %v", line, err)
	}
	return v.File, v.Defs
}

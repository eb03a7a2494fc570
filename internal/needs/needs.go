// Package needs is how a test says that something from outside Go it
// needs — a program such as node, java or chromium, or a package installed
// from a registry — cannot be had: it skips with one line of one form,
// "needs WHAT: HOW", the same in every such test. When $A2FARM_SKIPPED
// names a file, the line is appended to it with the test's name, so that
// make test can list every check a green run skipped. Tests only.
package needs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SkippedEnv names the file that collects the skip lines.
const SkippedEnv = "A2FARM_SKIPPED"

// Missing skips tb: what it needs, and how to get it.
func Missing(tb testing.TB, what, how string) {
	tb.Helper()
	line := fmt.Sprintf("needs %s: %s", what, how)
	if path := os.Getenv(SkippedEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s: %s\n", tb.Name(), line) // one short write: appends from parallel tests stay whole
			f.Close()
		}
	}
	tb.Skip(line)
}

// Program returns the path of the first of names found on $PATH, or skips
// tb saying what it needs and how to get it.
func Program(tb testing.TB, what, how string, names ...string) string {
	tb.Helper()
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	Missing(tb, what, how)
	return ""
}

// NPMPackage installs an npm package (name@version) once into the user's
// cache and returns its prefix folder (the package is under
// node_modules/) and node's path; without node and npm, or when the
// registry cannot be reached, it skips tb.
func NPMPackage(tb testing.TB, spec string) (prefix, node string) {
	tb.Helper()
	node = Program(tb, "node and npm", "install Node.js (Debian: apt-get install nodejs npm)", "node")
	npm := Program(tb, "node and npm", "install Node.js (Debian: apt-get install nodejs npm)", "npm")
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	prefix = filepath.Join(cache, "a2farm-test", "npm", strings.NewReplacer("/", "+", "@", "_").Replace(spec))
	done := filepath.Join(prefix, ".installed")
	if _, err := os.Stat(done); err == nil {
		return prefix, node
	}
	out, err := exec.Command(npm, "install", "--prefix", prefix, "--no-audit", "--no-fund", "--silent", spec).CombinedOutput()
	if err != nil {
		Missing(tb, "the npm package "+spec, fmt.Sprintf("npm install could not fetch it (%v: %s); the npm registry must be reachable", err, lastLine(out)))
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	return prefix, node
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

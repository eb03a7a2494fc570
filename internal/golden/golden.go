// Package golden compares test output with files under testdata/ and
// rewrites them when tests run with -update. It is imported by tests only.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is registered once for every test binary that imports golden.
var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// Check compares got with testdata/name; under -update it writes got there
// instead.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	CheckFile(t, filepath.Join("testdata", name), got)
}

// CheckFile is Check for a file outside testdata/ (a generated document).
func CheckFile(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; check the output and run go test -update if the change is intended.\ngot:\n%s", path, got)
	}
}

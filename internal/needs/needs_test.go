package needs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMissingSkipsAndRecords: a missing program skips the test, and the
// skip line, in its one form, is recorded for make test to list.
func TestMissingSkipsAndRecords(t *testing.T) {
	record := filepath.Join(t.TempDir(), "skipped")
	t.Setenv(SkippedEnv, record)
	var wasSkipped bool
	t.Run("tool", func(t *testing.T) {
		defer func() { wasSkipped = t.Skipped() }()
		Program(t, "a program nobody has (nope-a2farm)", "apt-get install nope", "nope-a2farm-1", "nope-a2farm-2")
		t.Error("Program returned for a program that is not there")
	})
	if !wasSkipped {
		t.Error("the test was not skipped")
	}
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != "TestMissingSkipsAndRecords/tool: needs a program nobody has (nope-a2farm): apt-get install nope\n" {
		t.Errorf("recorded %q", got)
	}
	if Program(t, "go", "install Go", "nope-a2farm", "go") == "" {
		t.Error("go not found by Program")
	}
}

package agent

import (
	"os"
	"path/filepath"
	"testing"
)

var testRoot string

func tempDir() (string, error) { return filepath.Join(testRoot, "sample"), nil }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "a2farm-agent-test")
	if err != nil {
		panic(err)
	}
	testRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

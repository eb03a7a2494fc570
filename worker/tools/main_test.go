package tools

import (
	"os"
	"testing"
)

var tempDir string

func tempRoot() string { return tempDir }

// TestMain gives the shared sample index a folder that outlives single
// tests and is removed at the end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "a2farm-tools-test")
	if err != nil {
		panic(err)
	}
	tempDir = dir
	code := m.Run()
	if idx, err := sampleIndex(); err == nil {
		idx.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

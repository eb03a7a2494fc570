package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesOnlyOnSuccess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "f.txt")
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "one"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error { io.WriteString(w, "half"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	data, _ := os.ReadFile(path)
	if string(data) != "one" {
		t.Errorf("content = %q; a failed write must leave the old file", data)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("leftover temporary files: %v", entries)
	}
}

// TestWriteCreatesMissingFolders: both kinds of write create every
// missing folder on the way and leave only the file behind.
func TestWriteCreatesMissingFolders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(string, func(io.Writer) error) error
	}{{"durable", Write}, {"cache", WriteCache}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "a", "b", "c", "f.txt")
			for _, content := range []string{"first", "second"} {
				if err := tc.write(path, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }); err != nil {
					t.Fatal(err)
				}
				if data, err := os.ReadFile(path); err != nil || string(data) != content {
					t.Fatalf("content = %q, %v; want %q", data, err, content)
				}
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("folder holds %v; want only the file", entries)
			}
			if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o644 {
				t.Errorf("file mode %v, %v; want 0644", info.Mode(), err)
			}
		})
	}
}

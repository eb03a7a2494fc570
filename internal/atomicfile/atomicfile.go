// Package atomicfile writes files so that readers never see a partial
// one: the content goes to a temporary file in the same folder, is synced,
// and is renamed into place.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what write produces, creating the
// parent folder when needed, and syncs it to disk before the rename.
func Write(path string, write func(io.Writer) error) error { return write1(path, write, true) }

// WriteCache is Write without the sync, for caches: after a crash an entry
// may be empty or damaged, and readers must treat it as a miss.
func WriteCache(path string, write func(io.Writer) error) error { return write1(path, write, false) }

func write1(path string, write func(io.Writer) error, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Package atomicfile writes files so that readers never see a partial
// one: the content goes to a temporary file in the same folder, is synced,
// and is renamed into place.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what write produces, creating the
// parent folders when needed. It returns once the file survives a crash:
// the content is synced before the rename, and the folder after it (and
// every folder it created, in its parent), since a rename is only durable
// once its directory entry is on disk.
func Write(path string, write func(io.Writer) error) error { return write1(path, write, true) }

// WriteCache is Write without the syncs, for caches: after a crash an
// entry may be missing, empty or damaged, and readers must treat it as a
// miss.
func WriteCache(path string, write func(io.Writer) error) error { return write1(path, write, false) }

func write1(path string, write func(io.Writer) error, durable bool) error {
	dir := filepath.Dir(path)
	if err := mkdirAll(dir, durable); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
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
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	if durable {
		return syncDir(dir)
	}
	return nil
}

// mkdirAll creates dir and its missing parents; when durable, it syncs
// the parent of every folder it created so that the new entries survive
// a crash.
func mkdirAll(dir string, durable bool) error {
	if _, err := os.Stat(dir); err == nil || !durable {
		return os.MkdirAll(dir, 0o755)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir flushes a folder's entries to disk.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}

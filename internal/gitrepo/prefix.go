package gitrepo

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrPrefixUnsupported says that ObjectsWithPrefix cannot answer for this
// repository on its own (it borrows objects from another, or keeps an
// index format it does not read); go-git's resolution still can.
var ErrPrefixUnsupported = errors.New("object prefix lookup unsupported")

// ObjectsWithPrefix lists the ids of every object whose id starts with the
// hexadecimal prefix (4 to 39 digits), from the loose objects and the pack
// indexes. It reads only the slice of each pack index that holds ids with
// the prefix's first byte, where go-git loads and walks every index whole
// (on ansible: 0.3 s and 140 MB to expand one abbreviated id).
func (r *Repo) ObjectsWithPrefix(prefix string) ([]string, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < 4 || len(prefix) >= 40 {
		return nil, fmt.Errorf("object prefix %q: want 4 to 39 hexadecimal digits", prefix)
	}
	if _, err := hex.DecodeString(prefix[:len(prefix)&^1]); err != nil || strings.Trim(prefix, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("object prefix %q: want hexadecimal digits", prefix)
	}
	objects := r.objectsDir()
	if _, err := os.Stat(filepath.Join(objects, "info", "alternates")); err == nil {
		return nil, ErrPrefixUnsupported
	}
	seen := map[string]bool{}
	loose, err := os.ReadDir(filepath.Join(objects, prefix[:2]))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range loose {
		if id := prefix[:2] + e.Name(); len(id) == 40 && strings.HasPrefix(id, prefix) {
			seen[id] = true
		}
	}
	packs, err := filepath.Glob(filepath.Join(objects, "pack", "*.idx"))
	if err != nil {
		return nil, err
	}
	for _, p := range packs {
		if err := packIndexPrefix(p, prefix, seen); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	return ids, nil
}

// objectsDir is the repository's object folder.
func (r *Repo) objectsDir() string {
	if st, err := os.Stat(filepath.Join(r.path, ".git")); err == nil && st.IsDir() {
		return filepath.Join(r.path, ".git", "objects")
	}
	return filepath.Join(r.path, "objects")
}

// packIndexPrefix adds to seen the ids of a version 2 pack index (git's
// format since 1.5.2) that start with prefix. The index is a 256-entry
// fan-out table of cumulative counts by first byte, then the sorted ids:
// the ids with the prefix's first byte are one contiguous run.
func packIndexPrefix(path, prefix string, seen map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const headerSize, fanoutSize, idSize = 8, 256 * 4, 20
	head := make([]byte, headerSize+fanoutSize)
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("pack index %s: %w", path, err)
	}
	if !bytes.Equal(head[:4], []byte{0xff, 't', 'O', 'c'}) || binary.BigEndian.Uint32(head[4:8]) != 2 {
		return ErrPrefixUnsupported
	}
	first, _ := hex.DecodeString(prefix[:2])
	fanout := head[headerSize:]
	var from uint32
	if first[0] > 0 {
		from = binary.BigEndian.Uint32(fanout[(int(first[0])-1)*4:])
	}
	to := binary.BigEndian.Uint32(fanout[int(first[0])*4:])
	if to < from {
		return fmt.Errorf("pack index %s: fan-out table out of order", path)
	}
	run := make([]byte, int(to-from)*idSize)
	if _, err := f.ReadAt(run, int64(headerSize+fanoutSize)+int64(from)*idSize); err != nil {
		return fmt.Errorf("pack index %s: %w", path, err)
	}
	for i := 0; i < len(run); i += idSize {
		if id := hex.EncodeToString(run[i : i+idSize]); strings.HasPrefix(id, prefix) {
			seen[id] = true
		}
	}
	return nil
}

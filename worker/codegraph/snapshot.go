package codegraph

import (
	"context"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/lang"
)

// SourceFile is one source file of a snapshot.
type SourceFile struct {
	Path    string
	Blob    string // git blob id
	Content []byte
}

// Snapshot is the source of a repository at one commit.
type Snapshot struct {
	Repo   string
	Commit string
	// Files are sorted by path.
	Files []SourceFile
	// Skipped lists files left out because they are not valid UTF-8.
	Skipped []string
}

// IsSourcePath reports whether the graph indexes a path: files the
// language indexes (.py, .pyx and .pxd for Python) outside folders whose
// path contains ".git" (as the reference builder, which also skips
// ".github").
func IsSourcePath(l lang.Language, p string) bool {
	return l.Indexed(p) && !strings.Contains(path.Dir(p), ".git")
}

// BlobReader reads git blobs by id.
type BlobReader interface {
	ReadBlob(id string) ([]byte, error)
}

// LoadSnapshot reads the sources of snap that l indexes. Symlinks are
// never followed; files that are not valid UTF-8 are skipped and listed.
func LoadSnapshot(ctx context.Context, l lang.Language, repo string, snap *gitrepo.Snapshot) (*Snapshot, error) {
	entries, err := snap.Files(func(p string) bool { return IsSourcePath(l, p) })
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Repo: repo, Commit: snap.Commit()}
	blobs := snap.Repo()
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, err := blobs.ReadBlob(e.Blob)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", e.Path, err)
		}
		if !utf8.Valid(data) {
			s.Skipped = append(s.Skipped, e.Path)
			continue
		}
		s.Files = append(s.Files, SourceFile{Path: e.Path, Blob: e.Blob, Content: data})
	}
	return s, nil
}

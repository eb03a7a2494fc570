package codegraph

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
)

// SourceFile is one source file of a snapshot.
type SourceFile struct {
	Path    string
	Blob    string // git blob id
	Content []byte
	// Size is the content's length in bytes, set also when the content is
	// not held (a file a stored base already has; see Known).
	Size int
}

// Len is the file's length in bytes.
func (f SourceFile) Len() int {
	if f.Content != nil {
		return len(f.Content)
	}
	return f.Size
}

// Known tells LoadSnapshotKnown which files need not be read: for a file
// it knows (known), whether the snapshot lists it (a non-UTF-8 file is
// left out) and the file to list, its Size set and its content not held.
type Known func(path, blob string) (f SourceFile, listed, known bool)

// Snapshot is the source of a repository at one commit.
type Snapshot struct {
	Repo   string
	Commit string
	// Files are sorted by path.
	Files []SourceFile
	// Skipped lists files left out because they are not valid UTF-8.
	Skipped []string
	// Project holds the files a language links with that are not sources
	// (lang.ProjectFiler: Go's go.mod), by path.
	Project map[string][]byte
	// ReadTime is how long reading the sources from git objects took.
	ReadTime time.Duration
}

// IsSourcePath reports whether the graph reads a path: files one of the
// languages reads outside folders whose path contains ".git" (as the
// reference builder, which also skips ".github").
func IsSourcePath(langs *lang.Set, p string) bool {
	return langs.Reads(p) && !strings.Contains(path.Dir(p), ".git")
}

// BlobReader reads git blobs by id.
type BlobReader interface {
	ReadBlob(id string) ([]byte, error)
}

// LoadSnapshot reads the sources of snap that the languages read. Symlinks are
// never followed; files that are not valid UTF-8 are skipped and listed.
func LoadSnapshot(ctx context.Context, langs *lang.Set, repo string, snap *gitrepo.Snapshot) (*Snapshot, error) {
	return LoadSnapshotKnown(ctx, langs, repo, snap, nil)
}

// LoadSnapshotKnown is LoadSnapshot reading only the contents of the files
// known does not know (nil: every file's).
func LoadSnapshotKnown(ctx context.Context, langs *lang.Set, repo string, snap *gitrepo.Snapshot, known Known) (*Snapshot, error) {
	entries, project, err := snapshotEntries(langs, snap)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s := &Snapshot{Repo: repo, Commit: snap.Commit()}
	defer func() { s.ReadTime = time.Since(start) }()
	blobs := snap.Repo()
	if s.Project, err = readProject(blobs, project); err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if known != nil {
			if f, listed, ok := known(e.Path, e.Blob); ok {
				if listed {
					s.Files = append(s.Files, f)
				} else {
					s.Skipped = append(s.Skipped, e.Path)
				}
				continue
			}
		}
		f, ok, err := readSource(blobs, e)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.Skipped = append(s.Skipped, e.Path)
			continue
		}
		s.Files = append(s.Files, f)
	}
	return s, nil
}

// snapshotEntries lists the snapshot's sources and, apart, the project
// files its languages link with, in one walk of its tree.
// ListSnapshot lists the sources LoadSnapshot reads, by path and blob,
// reading no content.
func ListSnapshot(langs *lang.Set, snap *gitrepo.Snapshot) ([]SourceFile, error) {
	entries, _, err := snapshotEntries(langs, snap)
	out := make([]SourceFile, len(entries))
	for i, e := range entries {
		out[i] = SourceFile{Path: e.Path, Blob: e.Blob}
	}
	return out, err
}

func snapshotEntries(langs *lang.Set, snap *gitrepo.Snapshot) (sources, project []gitrepo.Entry, err error) {
	all, err := snap.Files(func(p string) bool { return IsSourcePath(langs, p) || langs.ReadsProjectFile(p) })
	if err != nil {
		return nil, nil, err
	}
	for _, e := range all {
		if IsSourcePath(langs, e.Path) {
			sources = append(sources, e)
		} else {
			project = append(project, e)
		}
	}
	return sources, project, nil
}

// readProject reads the project files (nil when there are none).
func readProject(blobs BlobReader, entries []gitrepo.Entry) (map[string][]byte, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		data, err := blobs.ReadBlob(e.Blob)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", e.Path, err)
		}
		out[e.Path] = data
	}
	return out, nil
}

// readSource reads one file; ok is false when it is not valid UTF-8.
func readSource(blobs BlobReader, e gitrepo.Entry) (f SourceFile, ok bool, err error) {
	data, err := blobs.ReadBlob(e.Blob)
	if err != nil {
		return SourceFile{}, false, fmt.Errorf("read %s: %w", e.Path, err)
	}
	return SourceFile{Path: e.Path, Blob: e.Blob, Content: data, Size: len(data)}, utf8.Valid(data), nil
}

// ParseSnapshot reads the sources of snap that the languages read, as LoadSnapshot
// does, and parses them, each as soon as it is read: the repository
// serialises reads, so one goroutine reads while a parser per CPU works
// through what has arrived. parsed[i] belongs to the snapshot's Files[i].
func ParseSnapshot(ctx context.Context, langs *lang.Set, repo string, snap *gitrepo.Snapshot) (*Snapshot, []*lang.File, error) {
	entries, projectEntries, err := snapshotEntries(langs, snap)
	if err != nil {
		return nil, nil, err
	}
	project, err := readProject(snap.Repo(), projectEntries)
	if err != nil {
		return nil, nil, err
	}
	files := make([]SourceFile, len(entries))
	parsed := make([]*lang.File, len(entries))
	valid := make([]bool, len(entries))
	read := make(chan int, len(entries))
	g, ctx := errgroup.WithContext(ctx)
	start := time.Now()
	var readTime time.Duration
	g.Go(func() error {
		defer close(read)
		defer func() { readTime = time.Since(start) }()
		blobs := snap.Repo()
		// Largest first: a big file read last would leave one parser
		// working alone at the end.
		order := make([]int, len(entries))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(entries[b].Size, entries[a].Size) })
		for _, i := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			if files[i], valid[i], err = readSource(blobs, entries[i]); err != nil {
				return err
			}
			if valid[i] {
				read <- i
			}
		}
		return nil
	})
	parseArriving(ctx, g, langs, files, parsed, read, max(1, runtime.GOMAXPROCS(0)))
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	s := &Snapshot{Repo: repo, Commit: snap.Commit(), ReadTime: readTime, Project: project}
	out := parsed[:0]
	for i, f := range files {
		if !valid[i] {
			s.Skipped = append(s.Skipped, f.Path)
			continue
		}
		s.Files = append(s.Files, f)
		out = append(out, parsed[i])
	}
	return s, out, nil
}

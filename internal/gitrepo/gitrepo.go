// Package gitrepo reads files of a repository at a commit straight from git
// objects, without a work tree. Repositories are opened with a storer that
// keeps pack file descriptors open, which makes repeated reads and history
// walks several times faster than go-git's default.
package gitrepo

import (
	"crypto"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// plainSHA1 makes go-git hash objects with the standard library's SHA-1
// (hardware-accelerated) instead of its collision-detecting one. Here ids
// only key caches and lookups in repositories the farm mirrors itself —
// they defend against nothing — and the detecting hash cost a third of
// reading a snapshot cold. The two agree on every object that is not a
// crafted collision.
var plainSHA1 = sync.OnceValue(func() error { return hash.RegisterHash(crypto.SHA1, sha1.New) })

// objectCacheBytes bounds go-git's cache of decoded objects (delta bases
// among them). Snapshot reads touch each blob once and history walks keep
// their own tree cache, so go-git's default of 96 MiB held memory without
// saving time: on ansible a cold index build is as fast with 16 MiB.
const objectCacheBytes = 16 * cache.MiByte

// ErrNotFound reports a missing repository, commit or path.
var ErrNotFound = errors.New("not found")

// DirName is the folder name of a dataset repository inside a repos
// directory: "psf/requests" lives in "psf__requests".
func DirName(repo string) string { return strings.ReplaceAll(repo, "/", "__") }

// Locate finds the repository for "owner/name" under reposDir: a folder
// named owner__name (bare or with a work tree), or owner__name.git.
func Locate(reposDir, repo string) (string, error) {
	if strings.Count(repo, "/") != 1 || strings.Contains(repo, "..") {
		return "", fmt.Errorf("repository name %q: want owner/name", repo)
	}
	base := filepath.Join(reposDir, DirName(repo))
	for _, dir := range []string{base, base + ".git"} {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir, nil
		}
	}
	return "", fmt.Errorf("repository %s: no %s under %s: %w", repo, DirName(repo), reposDir, ErrNotFound)
}

// Repo is an open repository. Reads are serialised: go-git's storer shares
// open pack files between readers.
type Repo struct {
	mu      sync.Mutex
	repo    *git.Repository
	storage *countingStorage
	path    string
}

// countingStorage counts the objects read through it, so that a caller
// can tell — and a test or benchmark check — that an answer came without
// touching git (a big repository's first object read loads its pack index:
// hundreds of milliseconds and 100+ MB).
type countingStorage struct {
	*filesystem.Storage
	read atomic.Int64
}

func (s *countingStorage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	s.read.Add(1)
	return s.Storage.EncodedObject(t, h)
}

// ObjectsRead is the number of git objects read from the repository since
// it was opened.
func (r *Repo) ObjectsRead() int64 { return r.storage.read.Load() }

// Open opens a bare repository or one with a work tree at dir.
func Open(dir string) (*Repo, error) {
	gitDir := dir
	if st, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
		if !st.IsDir() {
			return nil, fmt.Errorf("open %s: .git is a file (linked work tree); pass the main repository", dir)
		}
		gitDir = filepath.Join(dir, ".git")
	} else if _, err := os.Stat(filepath.Join(dir, "objects")); err != nil {
		return nil, fmt.Errorf("open %s: not a git repository: %w", dir, ErrNotFound)
	}
	if err := plainSHA1(); err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	storage := &countingStorage{Storage: filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRU(objectCacheBytes),
		filesystem.Options{KeepDescriptors: true})}
	repo, err := git.Open(storage, nil)
	if err != nil {
		storage.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &Repo{repo: repo, storage: storage, path: dir}, nil
}

// Close releases the pack file descriptors.
func (r *Repo) Close() error { return r.storage.Close() }

// Path is the directory the repository was opened from.
func (r *Repo) Path() string { return r.path }

// Snapshot is the tree of one commit.
type Snapshot struct {
	repo   *Repo
	commit *object.Commit
	tree   *object.Tree
}

// At resolves a full or abbreviated commit id (or any revision go-git
// understands) to a snapshot.
func (r *Repo) At(rev string) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := plumbing.NewHash(rev)
	if !fullID(rev) {
		// A name or a short id: resolving scans refs and the pack index,
		// which a full id (what datasets hold) does not need.
		hash, err := r.repo.ResolveRevision(plumbing.Revision(rev))
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", rev, ErrNotFound)
		}
		id = *hash
	}
	commit, err := r.repo.CommitObject(id)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", rev, errors.Join(ErrNotFound, err))
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, fmt.Errorf("tree of %s: %w", rev, err)
	}
	return &Snapshot{repo: r, commit: commit, tree: tree}, nil
}

// fullID reports whether rev is a full hexadecimal object id.
func fullID(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for i := range len(rev) {
		if c := rev[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// Commit is the snapshot's full commit id.
func (s *Snapshot) Commit() string { return s.commit.Hash.String() }

// ReadFile returns the content of a regular file at path, or an error
// wrapping ErrNotFound when the path does not exist (or is not a file).
func (s *Snapshot) ReadFile(path string) ([]byte, error) {
	s.repo.mu.Lock()
	defer s.repo.mu.Unlock()
	f, err := s.tree.File(path)
	if err != nil {
		if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
			return nil, fmt.Errorf("%s at %s: %w", path, short(s.Commit()), ErrNotFound)
		}
		return nil, fmt.Errorf("%s at %s: %w", path, short(s.Commit()), err)
	}
	if !f.Mode.IsFile() {
		return nil, fmt.Errorf("%s at %s is not a regular file: %w", path, short(s.Commit()), ErrNotFound)
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

func short(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}

// Entry is a regular file of a snapshot.
type Entry struct {
	Path string
	// Blob is the git blob id of the content: equal blobs have equal
	// content, which is what content-addressed caches key on.
	Blob string
	Size int64
}

// Files lists the regular files (executable or not) whose path keep
// accepts, in git tree order (sorted by path). Symlinks and submodules are
// left out: tools must never follow a link out of the snapshot.
func (s *Snapshot) Files(keep func(path string) bool) ([]Entry, error) {
	s.repo.mu.Lock()
	defer s.repo.mu.Unlock()
	var out []Entry
	walker := object.NewTreeWalker(s.tree, true, nil)
	defer walker.Close()
	for {
		name, entry, err := walker.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("walk tree of %s: %w", short(s.Commit()), err)
		}
		if !entry.Mode.IsFile() || entry.Mode == filemode.Symlink || !keep(name) {
			continue
		}
		size, err := s.repo.repo.Storer.EncodedObjectSize(entry.Hash)
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", name, err)
		}
		out = append(out, Entry{Path: name, Blob: entry.Hash.String(), Size: size})
	}
	return out, nil
}

// ReadBlob returns the content of a blob by id.
func (r *Repo) ReadBlob(id string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	blob, err := r.repo.BlobObject(plumbing.NewHash(id))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", id, err)
	}
	rd, err := blob.Reader()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", id, err)
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// Repo returns the repository of the snapshot.
func (s *Snapshot) Repo() *Repo { return s.repo }

// Package repogen writes real git repositories from file maps, straight into
// git objects (no work tree): fixtures for tests and the built-in sample
// that `a2farm up` and `make run` use. Commits are deterministic: the same
// calls produce the same commit ids.
package repogen

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
)

// Epoch is the author time of the first commit; each commit is a minute
// after its parent.
var epoch = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// Repo builds commits in a bare repository.
type Repo struct {
	repo  *git.Repository
	files map[string]map[string]string // commit id -> path -> content
	count int
}

// Init creates a bare repository at dir.
func Init(dir string) (*Repo, error) {
	repo, err := git.PlainInit(dir, true)
	if err != nil {
		return nil, fmt.Errorf("init %s: %w", dir, err)
	}
	return &Repo{repo: repo, files: map[string]map[string]string{}}, nil
}

// Change describes one commit: files to write (path -> content), paths
// to delete, symbolic links to create (path -> target) and files to make
// executable (written or already there).
type Change struct {
	Message    string
	Write      map[string]string
	Delete     []string
	Symlinks   map[string]string
	Executable []string
	// When is the commit's author and committer time; zero: a minute after
	// the builder's previous commit.
	When time.Time
}

// symlinkPrefix and execPrefix mark a symlink and an executable file in the
// builder's file map (no real file content starts with a NUL byte).
const (
	symlinkPrefix = "\x00symlink:"
	execPrefix    = "\x00exec:"
)

// Commit creates a commit whose parent is parent ("" for a root commit)
// and returns its id. Branch names are not touched; see SetBranch.
func (r *Repo) Commit(parent string, ch Change) (string, error) {
	var parents []string
	if parent != "" {
		parents = []string{parent}
	}
	return r.Merge(parents, ch)
}

// Merge creates a commit with the given parents (none: a root commit);
// the change applies to the files of the first parent.
func (r *Repo) Merge(parentIDs []string, ch Change) (string, error) {
	files := map[string]string{}
	var parents []plumbing.Hash
	for i, parent := range parentIDs {
		prev, ok := r.files[parent]
		if !ok {
			return "", fmt.Errorf("commit %s was not made by this builder", parent)
		}
		if i == 0 {
			maps.Copy(files, prev)
		}
		parents = append(parents, plumbing.NewHash(parent))
	}
	for _, p := range ch.Delete {
		if _, ok := files[p]; !ok {
			return "", fmt.Errorf("delete %s: no such file", p)
		}
		delete(files, p)
	}
	for p, content := range ch.Write {
		if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "..") {
			return "", fmt.Errorf("bad path %q", p)
		}
		files[p] = content
	}
	for p, target := range ch.Symlinks {
		files[p] = symlinkPrefix + target
	}
	for _, p := range ch.Executable {
		content, ok := files[p]
		if !ok {
			return "", fmt.Errorf("executable %s: no such file", p)
		}
		if !strings.HasPrefix(content, execPrefix) {
			files[p] = execPrefix + content
		}
	}
	tree, err := r.writeTree(files, "")
	if err != nil {
		return "", err
	}
	when := ch.When
	if when.IsZero() {
		when = epoch.Add(time.Duration(r.count) * time.Minute)
	}
	r.count++
	sig := object.Signature{Name: "a2farm fixture", Email: "fixture@a2farm.invalid", When: when}
	c := &object.Commit{
		Author:       sig,
		Committer:    sig,
		Message:      ch.Message + "\n",
		TreeHash:     tree,
		ParentHashes: parents,
	}
	id, err := store(r.repo.Storer, c)
	if err != nil {
		return "", fmt.Errorf("write commit: %w", err)
	}
	r.files[id.String()] = files
	return id.String(), nil
}

// SetBranch points refs/heads/name at commit and makes it HEAD.
func (r *Repo) SetBranch(name, commit string) error {
	ref := plumbing.NewBranchReferenceName(name)
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(ref, plumbing.NewHash(commit))); err != nil {
		return fmt.Errorf("set branch %s: %w", name, err)
	}
	if err := r.repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, ref)); err != nil {
		return fmt.Errorf("set HEAD: %w", err)
	}
	return nil
}

// Diff returns the unified diff (git format) that turns commit from into
// commit to.
func (r *Repo) Diff(from, to string) (string, error) {
	a, err := r.repo.CommitObject(plumbing.NewHash(from))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", from, err)
	}
	b, err := r.repo.CommitObject(plumbing.NewHash(to))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", to, err)
	}
	p, err := a.Patch(b)
	if err != nil {
		return "", fmt.Errorf("diff %s..%s: %w", from, to, err)
	}
	return p.String(), nil
}

// Files returns the files of a commit made by this builder.
func (r *Repo) Files(commit string) map[string]string { return maps.Clone(r.files[commit]) }

// writeTree writes the tree for the files under dir and returns its hash.
func (r *Repo) writeTree(files map[string]string, dir string) (plumbing.Hash, error) {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	subdirs := map[string]bool{}
	var entries []object.TreeEntry
	for p, content := range files {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		rest := p[len(prefix):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			subdirs[rest[:i]] = true
			continue
		}
		mode := filemode.Regular
		if target, ok := strings.CutPrefix(content, symlinkPrefix); ok {
			mode, content = filemode.Symlink, target // a link's blob is its target
		} else if body, ok := strings.CutPrefix(content, execPrefix); ok {
			mode, content = filemode.Executable, body
		}
		blob := r.repo.Storer.NewEncodedObject()
		blob.SetType(plumbing.BlobObject)
		w, err := blob.Writer()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if _, err := w.Write([]byte(content)); err != nil {
			return plumbing.ZeroHash, err
		}
		if err := w.Close(); err != nil {
			return plumbing.ZeroHash, err
		}
		h, err := r.repo.Storer.SetEncodedObject(blob)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("write blob %s: %w", p, err)
		}
		entries = append(entries, object.TreeEntry{Name: rest, Mode: mode, Hash: h})
	}
	for name := range subdirs {
		h, err := r.writeTree(files, path.Join(dir, name))
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
	}
	// git orders tree entries by name, with directories compared as if
	// their name ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(key(a), key(b)) })
	return store(r.repo.Storer, &object.Tree{Entries: entries})
}

type encoder interface {
	Encode(plumbing.EncodedObject) error
}

func store(s storage.Storer, obj encoder) (plumbing.Hash, error) {
	enc := s.NewEncodedObject()
	if err := obj.Encode(enc); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(enc)
}

package gitrepo

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/a2farm/a2farm/internal/diff"
)

// PatchedEmail is the author of the commits Patched writes: a snapshot that
// is a base commit plus a patch (a SWE-smith bug), never a commit of the
// project's history. History tools start below it (IsPatched).
const PatchedEmail = "patched-snapshot@a2farm.invalid"

// Patched writes the snapshot "base plus patch" into the repository as a
// commit whose parent is base — blobs, trees and the commit object, no
// branch and no work tree — and returns its id. The commit is a function
// of base, patch and label alone (its author is PatchedEmail, its time the
// base's), so every process that writes it gets the same id, and its tree
// is the one a checkout of base with the patch applied by git would
// commit. A patch that does not apply is an error naming the file.
func (r *Repo) Patched(base, patch, label string) (string, error) {
	fps, err := diff.Parse(patch)
	if err != nil {
		return "", fmt.Errorf("patch of %s: %w", label, err)
	}
	if len(fps) == 0 {
		return "", fmt.Errorf("patch of %s: no file changes", label)
	}
	full, err := r.Resolve(base)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	commit, err := r.repo.CommitObject(plumbing.NewHash(full))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", base, errors.Join(ErrNotFound, err))
	}
	tree, err := commit.Tree()
	if err != nil {
		return "", fmt.Errorf("tree of %s: %w", base, err)
	}
	changes := map[string]*object.TreeEntry{} // path → new entry, nil: removed
	for _, fp := range fps {
		if err := r.change(tree, fp, changes); err != nil {
			return "", fmt.Errorf("patch of %s: %w", label, err)
		}
	}
	root, err := r.rewrite(tree, "", changes)
	if err != nil {
		return "", err
	}
	sig := object.Signature{Name: "a2farm", Email: PatchedEmail, When: commit.Committer.When}
	c := &object.Commit{Author: sig, Committer: sig, TreeHash: root, ParentHashes: []plumbing.Hash{commit.Hash},
		Message: patchedMessage(label, commit.Hash)}
	id, err := r.store(c)
	if err != nil {
		return "", fmt.Errorf("write the commit of %s: %w", label, err)
	}
	return id.String(), nil
}

// change records what one file patch does: the new content's blob under
// the new path (the old path's mode kept), and the old path removed when
// the file is deleted or renamed.
func (r *Repo) change(tree *object.Tree, fp diff.FilePatch, changes map[string]*object.TreeEntry) error {
	if fp.Deleted() {
		changes[fp.OldPath] = nil
		return nil
	}
	var old []byte
	mode := filemode.Regular
	if !fp.Added() {
		f, err := tree.File(fp.OldPath)
		if err != nil {
			return fmt.Errorf("%s does not exist at the base commit", fp.OldPath)
		}
		if old, err = readAll(f); err != nil {
			return err
		}
		mode = f.Mode
	}
	content, err := diff.ApplyBytes(old, fp)
	if err != nil {
		return fmt.Errorf("%s: %w", fp.Path(), err)
	}
	blob := r.repo.Storer.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	w, err := blob.Writer()
	if err != nil {
		return err
	}
	if _, err := w.Write(content); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	id, err := r.repo.Storer.SetEncodedObject(blob)
	if err != nil {
		return fmt.Errorf("write %s: %w", fp.NewPath, err)
	}
	if !fp.Added() && fp.OldPath != fp.NewPath {
		changes[fp.OldPath] = nil
	}
	changes[fp.NewPath] = &object.TreeEntry{Name: path.Base(fp.NewPath), Mode: mode, Hash: id}
	return nil
}

func readAll(f *object.File) ([]byte, error) {
	rd, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// rewrite writes the tree at dir (tree nil: a new folder) with the changes
// under it and returns its id; only the folders on a changed path are
// written again. A folder left empty is the zero hash: its parent drops it.
func (r *Repo) rewrite(tree *object.Tree, dir string, changes map[string]*object.TreeEntry) (plumbing.Hash, error) {
	entries := map[string]object.TreeEntry{}
	if tree != nil {
		for _, e := range tree.Entries {
			entries[e.Name] = e
		}
	}
	subdirs := map[string]bool{}
	for p, e := range changes {
		rel, ok := strings.CutPrefix(p, dir)
		if !ok {
			continue
		}
		name, _, nested := strings.Cut(rel, "/")
		switch {
		case nested:
			subdirs[name] = true
		case e == nil:
			delete(entries, name)
		default:
			entries[name] = *e
		}
	}
	for name := range subdirs {
		var sub *object.Tree
		if e, ok := entries[name]; ok && e.Mode == filemode.Dir {
			t, err := r.repo.TreeObject(e.Hash)
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("tree %s%s: %w", dir, name, err)
			}
			sub = t
		}
		id, err := r.rewrite(sub, dir+name+"/", changes)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if id.IsZero() {
			delete(entries, name)
		} else {
			entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: id}
		}
	}
	if len(entries) == 0 && dir != "" {
		return plumbing.ZeroHash, nil
	}
	out := &object.Tree{}
	for _, e := range entries {
		out.Entries = append(out.Entries, e)
	}
	// Git orders a tree's entries by name, a folder's name as if it ended
	// in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(out.Entries, func(i, j int) bool { return key(out.Entries[i]) < key(out.Entries[j]) })
	return r.store(out)
}

// store encodes a tree or commit into the repository.
func (r *Repo) store(o interface {
	Encode(plumbing.EncodedObject) error
}) (plumbing.Hash, error) {
	obj := r.repo.Storer.NewEncodedObject()
	if err := o.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.repo.Storer.SetEncodedObject(obj)
}

// patchedMessage is the message of the commit Patched writes for label on
// base: it names the base, so that a history can tell the commit from the
// message and first parent alone (IsPatched), without reading git.
func patchedMessage(label string, base plumbing.Hash) string {
	return fmt.Sprintf("a2farm: %s, %s with its patch applied\n", label, base)
}

// IsPatched says whether a commit with this message and first parent is a
// patched snapshot Patched wrote: the task, not a commit of the project,
// which a history search must not show (it starts at the base).
func IsPatched(message, firstParent string) bool {
	m := strings.TrimRight(message, "\n") // a history store keeps messages without their final newlines
	return strings.HasPrefix(m, "a2farm: ") && strings.HasSuffix(m, ", "+firstParent+" with its patch applied")
}

package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// CommitHeader is what a history needs of a commit object.
type CommitHeader struct {
	SHA     string
	Tree    string
	Parents []string
	// CommitTime orders a walk, as `git log` does (committer time).
	CommitTime time.Time
	AuthorDate time.Time // in the author's time zone
	Message    string
}

// Resolve turns a revision (a full or short id, a branch, HEAD) into a full
// commit id.
func (r *Repo) Resolve(rev string) (string, error) {
	if fullID(rev) {
		return strings.ToLower(rev), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	hash, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", rev, ErrNotFound)
	}
	return hash.String(), nil
}

// ReadCommit reads the header of one commit object.
func (r *Repo) ReadCommit(sha string) (CommitHeader, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.repo.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		return CommitHeader{}, fmt.Errorf("commit %s: %w", sha, errors.Join(ErrNotFound, err))
	}
	h := CommitHeader{SHA: c.Hash.String(), Tree: c.TreeHash.String(), CommitTime: c.Committer.When,
		AuthorDate: c.Author.When, Message: c.Message}
	for _, p := range c.ParentHashes {
		h.Parents = append(h.Parents, p.String())
	}
	return h, nil
}

// TreePair names the trees of one commit and of its first parent ("" for
// a root commit, whose every file is new).
type TreePair struct{ Parent, Tree string }

// ChangedFiles returns, for each pair, the files that differ between the
// parent's tree and the commit's, sorted, as `git log --name-only` lists
// them (no rename detection; a mode change counts). Pairs given newest
// first, as a history walk meets them, share most trees: the raw trees are
// cached across the batch, within a bound.
func (r *Repo) ChangedFiles(ctx context.Context, pairs []TreePair) ([][]string, error) {
	d := newTreeDiffer(r)
	out := make([][]string, len(pairs))
	for i, p := range pairs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var from plumbing.Hash
		if p.Parent != "" {
			from = plumbing.NewHash(p.Parent)
		}
		files, err := d.changed(from, plumbing.NewHash(p.Tree), nil)
		if err != nil {
			return nil, err
		}
		slices.Sort(files)
		out[i] = slices.Compact(files)
	}
	return out, nil
}

// ShowPatch returns the first maxLines lines of a commit's diff stat and
// patch against its first parent (what `git show --stat --patch` prints
// after the header), and how many lines there were in all.
func (r *Repo) ShowPatch(sha string, maxLines int) (string, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.repo.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		return "", 0, fmt.Errorf("commit %s: %w", sha, ErrNotFound)
	}
	var parent *object.Commit
	if c.NumParents() > 0 {
		if parent, err = c.Parent(0); err != nil {
			return "", 0, err
		}
	}
	var patch *object.Patch
	if parent != nil {
		patch, err = parent.Patch(c)
	} else {
		var tree *object.Tree
		if tree, err = c.Tree(); err == nil {
			var changes object.Changes
			if changes, err = object.DiffTree(nil, tree); err == nil {
				patch, err = changes.Patch()
			}
		}
	}
	if err != nil {
		return "", 0, fmt.Errorf("patch of %s: %w", sha, err)
	}
	var stat strings.Builder
	for _, fs := range patch.Stats() {
		fmt.Fprintf(&stat, " %s | %d %s%s\n", fs.Name, fs.Addition+fs.Deletion,
			strings.Repeat("+", min(fs.Addition, 40)), strings.Repeat("-", min(fs.Deletion, 40)))
	}
	lines := strings.Split(strings.TrimRight(stat.String()+"\n"+patch.String(), "\n"), "\n")
	total := len(lines)
	if len(lines) > maxLines {
		lines = lines[:maxLines]
	}
	return strings.Join(lines, "\n"), total, nil
}

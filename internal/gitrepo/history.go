package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// CommitInfo is one commit of a history walk.
type CommitInfo struct {
	SHA        string
	Message    string
	AuthorDate time.Time // in the author's time zone
	// Files changed relative to the first parent, sorted; empty for merge
	// commits, as `git log --name-only` shows them.
	Files []string
}

// KnownFiles returns the changed files of a commit computed earlier, so a
// history walk skips the tree diff; nil disables the lookup.
type KnownFiles func(sha string) ([]string, bool)

// History returns up to limit commits reachable from rev (rev included),
// newest first by committer time, like `git log rev`. Commits after rev
// never appear.
func (r *Repo) History(ctx context.Context, rev string, limit int, known KnownFiles) ([]CommitInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hash, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", rev, ErrNotFound)
	}
	iter, err := r.repo.Log(&git.LogOptions{From: *hash, Order: git.LogOrderCommitterTime})
	if err != nil {
		return nil, fmt.Errorf("log %s: %w", rev, err)
	}
	defer iter.Close()
	var out []CommitInfo
	for len(out) < limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := iter.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("log %s: %w", rev, err)
		}
		files, ok := []string(nil), false
		if known != nil {
			files, ok = known(c.Hash.String())
		}
		if !ok {
			if files, err = changedFiles(ctx, c); err != nil {
				return nil, fmt.Errorf("files of %s: %w", c.Hash, err)
			}
		}
		out = append(out, CommitInfo{SHA: c.Hash.String(), Message: c.Message, AuthorDate: c.Author.When, Files: files})
	}
	return out, nil
}

func changedFiles(ctx context.Context, c *object.Commit) ([]string, error) {
	if c.NumParents() > 1 {
		return nil, nil
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	var parentTree *object.Tree
	if c.NumParents() == 1 {
		parent, err := c.Parent(0)
		if err != nil {
			return nil, err
		}
		if parentTree, err = parent.Tree(); err != nil {
			return nil, err
		}
	}
	changes, err := object.DiffTreeWithOptions(ctx, parentTree, tree, nil)
	if err != nil {
		return nil, err
	}
	files := make([]string, 0, len(changes))
	for _, ch := range changes {
		name := ch.To.Name
		if name == "" {
			name = ch.From.Name
		}
		files = append(files, name)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
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

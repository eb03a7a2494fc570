package gitrepo

import (
	"bytes"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
)

// treeDiffer lists the files that differ between two trees the way
// `git log --name-only` does (no rename detection; a mode change counts).
// It reads tree objects raw and descends only into subtrees whose ids
// differ, so a commit costs the trees on the paths it changed, not the
// whole snapshot; go-git's object.DiffTree decodes and hashes both trees
// whole and is ~60× slower on a big repository.
//
// Trees read recently are kept raw in two generations: a history walk
// diffs each commit against its parent, whose trees the next (older)
// commit reads again. The cache is bounded by entries, not by commits.
type treeDiffer struct {
	repo     *Repo
	cur, old map[plumbing.Hash][]byte
	// limit is the number of trees a generation holds before it ages.
	limit int
}

// treeCacheTrees bounds one generation of the raw tree cache; on ansible a
// generation is ~20 MB and the hit rate above 90 %.
const treeCacheTrees = 4096

func newTreeDiffer(r *Repo) *treeDiffer {
	return &treeDiffer{repo: r, cur: map[plumbing.Hash][]byte{}, old: map[plumbing.Hash][]byte{}, limit: treeCacheTrees}
}

// tree returns the raw content of a tree object. Only the read from the
// object store holds the repository's lock, so a history walk and a
// snapshot's reads interleave.
func (d *treeDiffer) tree(h plumbing.Hash) ([]byte, error) {
	if raw, ok := d.cur[h]; ok {
		return raw, nil
	}
	if raw, ok := d.old[h]; ok {
		d.keep(h, raw)
		return raw, nil
	}
	raw, err := d.read(h)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	d.keep(h, raw)
	return raw, nil
}

func (d *treeDiffer) read(h plumbing.Hash) ([]byte, error) {
	d.repo.mu.Lock()
	defer d.repo.mu.Unlock()
	obj, err := d.repo.storage.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return nil, err
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	raw := make([]byte, obj.Size())
	if _, err := io.ReadFull(rd, raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func (d *treeDiffer) keep(h plumbing.Hash, raw []byte) {
	if len(d.cur) >= d.limit {
		d.old, d.cur = d.cur, make(map[plumbing.Hash][]byte, d.limit)
	}
	d.cur[h] = raw
}

// treeEntry is one entry of a raw tree.
type treeEntry struct {
	mode []byte // octal, as stored ("40000" for a tree)
	name []byte
	hash plumbing.Hash
}

func (e *treeEntry) isTree() bool { return string(e.mode) == "40000" }

// nextEntry parses the entry at the start of raw and returns the rest.
func nextEntry(raw []byte) (treeEntry, []byte, error) {
	sp := bytes.IndexByte(raw, ' ')
	nul := bytes.IndexByte(raw, 0)
	if sp < 0 || nul < sp || len(raw) < nul+21 {
		return treeEntry{}, nil, fmt.Errorf("malformed tree entry")
	}
	e := treeEntry{mode: raw[:sp], name: raw[sp+1 : nul]}
	copy(e.hash[:], raw[nul+1:nul+21])
	return e, raw[nul+21:], nil
}

// compareEntries orders entries as git sorts a tree: by name, a tree's
// name compared as if it ended in "/".
func compareEntries(a, b *treeEntry) int {
	n := min(len(a.name), len(b.name))
	if c := bytes.Compare(a.name[:n], b.name[:n]); c != 0 {
		return c
	}
	ca, cb := terminator(a, n), terminator(b, n)
	switch {
	case ca < cb:
		return -1
	case ca > cb:
		return 1
	}
	return 0
}

func terminator(e *treeEntry, n int) byte {
	switch {
	case n < len(e.name):
		return e.name[n]
	case e.isTree():
		return '/'
	}
	return 0
}

// changed appends to out the paths of the files that differ between the
// trees from and to (from zero: every file of to).
func (d *treeDiffer) changed(from, to plumbing.Hash, out []string) ([]string, error) {
	if from.IsZero() {
		return d.all("", to, out)
	}
	return d.diff("", from, to, out)
}

// all appends every file under the tree h.
func (d *treeDiffer) all(prefix string, h plumbing.Hash, out []string) ([]string, error) {
	raw, err := d.tree(h)
	if err != nil {
		return out, err
	}
	for len(raw) > 0 {
		var e treeEntry
		if e, raw, err = nextEntry(raw); err != nil {
			return out, fmt.Errorf("tree %s: %w", h, err)
		}
		if out, err = d.side(prefix, &e, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// side appends the file e, or every file under it when it is a tree.
func (d *treeDiffer) side(prefix string, e *treeEntry, out []string) ([]string, error) {
	if e.isTree() {
		return d.all(prefix+string(e.name)+"/", e.hash, out)
	}
	return append(out, prefix+string(e.name)), nil
}

// diff merges the sorted entries of two trees.
func (d *treeDiffer) diff(prefix string, from, to plumbing.Hash, out []string) ([]string, error) {
	a, err := d.tree(from)
	if err != nil {
		return out, err
	}
	b, err := d.tree(to)
	if err != nil {
		return out, err
	}
	var ea, eb treeEntry
	hasA, hasB := false, false
	for {
		if !hasA && len(a) > 0 {
			if ea, a, err = nextEntry(a); err != nil {
				return out, fmt.Errorf("tree %s: %w", from, err)
			}
			hasA = true
		}
		if !hasB && len(b) > 0 {
			if eb, b, err = nextEntry(b); err != nil {
				return out, fmt.Errorf("tree %s: %w", to, err)
			}
			hasB = true
		}
		if !hasA && !hasB {
			return out, nil
		}
		c := 0
		switch {
		case !hasB:
			c = -1
		case !hasA:
			c = 1
		default:
			c = compareEntries(&ea, &eb)
		}
		switch {
		case c < 0: // only in from: deleted
			out, err = d.side(prefix, &ea, out)
			hasA = false
		case c > 0: // only in to: added
			out, err = d.side(prefix, &eb, out)
			hasB = false
		default:
			hasA, hasB = false, false
			if ea.hash == eb.hash && bytes.Equal(ea.mode, eb.mode) {
				continue
			}
			if ea.isTree() {
				out, err = d.diff(prefix+string(ea.name)+"/", ea.hash, eb.hash, out)
			} else {
				out = append(out, prefix+string(ea.name))
			}
		}
		if err != nil {
			return out, err
		}
	}
}

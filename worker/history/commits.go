package history

import (
	"context"
	"fmt"
	"regexp"
	"sync"

	"github.com/a2farm/a2farm/internal/gitrepo"
)

// MaxCommits bounds the commit index, as the reference does.
const MaxCommits = 7000

// Commit is one entry of the commit index.
type Commit struct {
	SHA     string // full id
	Subject string // first line of the message
	Message string
	Date    string // author date, ISO 8601 with the author's offset
	Files   []string
	// Issues are the "#N" references of the message, in order, unique.
	Issues []string
}

// Short is the 12-character id the tools print.
func (c *Commit) Short() string {
	if len(c.SHA) > 12 {
		return c.SHA[:12]
	}
	return c.SHA
}

// CommitIndex is the history of a snapshot: commits reachable from its
// commit (never later ones), newest first.
type CommitIndex struct {
	Commits []Commit
	repo    *gitrepo.Repo

	mu      sync.Mutex
	patches map[string]patchExcerpt // memo: rollouts of one issue repeat queries
}

type patchExcerpt struct {
	text  string
	total int
}

// maxMemoPatches bounds the patch memo of one index.
const maxMemoPatches = 512

var issueRef = regexp.MustCompile(`#(\d+)`)

// IssueRefs returns the unique "#N" references in text, in order.
func IssueRefs(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range issueRef.FindAllString(text, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// BuildCommitIndex is the history of the snapshot at commit (a full id):
// up to MaxCommits ancestors (its base's, for a patched snapshot: View), derived from the repository's store, which
// reads from git only what it lacks. Messages are taken from commit
// objects, so multi-paragraph messages are kept whole (the reference splits
// `git log` output on blank lines and loses them).
func BuildCommitIndex(ctx context.Context, repo *gitrepo.Repo, commit string, store *Store) (*CommitIndex, ViewStats, error) {
	commits, st, err := store.View(ctx, repo, commit, MaxCommits)
	if err != nil {
		return nil, st, err
	}
	return &CommitIndex{repo: repo, Commits: commits}, st, nil
}

// Patch returns the first maxLines lines of a commit's stat and patch and
// the total line count; ok is false when the repository is not available
// (an index loaded from cache without its repository).
func (ci *CommitIndex) Patch(sha string, maxLines int) (text string, total int, ok bool) {
	if ci.repo == nil {
		return "", 0, false
	}
	key := fmt.Sprintf("%s/%d", sha, maxLines)
	ci.mu.Lock()
	if p, ok := ci.patches[key]; ok {
		ci.mu.Unlock()
		return p.text, p.total, true
	}
	ci.mu.Unlock()
	text, total, err := ci.repo.ShowPatch(sha, maxLines)
	if err != nil {
		return "", 0, false
	}
	ci.mu.Lock()
	if ci.patches == nil || len(ci.patches) >= maxMemoPatches {
		ci.patches = map[string]patchExcerpt{}
	}
	ci.patches[key] = patchExcerpt{text, total}
	ci.mu.Unlock()
	return text, total, true
}

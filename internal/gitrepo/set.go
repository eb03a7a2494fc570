package gitrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// Set opens the repositories of a repos folder on demand and keeps them
// open; it is safe for concurrent use.
type Set struct {
	dir     string
	mu      sync.Mutex
	repos   map[string]*Repo
	patched map[string]string // repo@base+sha256(patch) → the patched snapshot's commit
}

// NewSet returns a set over reposDir (one repository per dataset repo,
// named owner__name).
func NewSet(reposDir string) *Set {
	return &Set{dir: reposDir, repos: map[string]*Repo{}, patched: map[string]string{}}
}

// Repo returns the open repository for "owner/name".
func (s *Set) Repo(name string) (*Repo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.repos[name]; ok {
		return r, nil
	}
	dir, err := Locate(s.dir, name)
	if err != nil {
		return nil, err
	}
	r, err := Open(dir)
	if err != nil {
		return nil, err
	}
	s.repos[name] = r
	return r, nil
}

// At opens the snapshot of repo at commit.
func (s *Set) At(repo, commit string) (*Snapshot, error) {
	r, err := s.Repo(repo)
	if err != nil {
		return nil, err
	}
	return r.At(commit)
}

// Snapshot is the commit of a snapshot: base itself when patch is empty,
// else the commit Patched writes for base plus patch (once per set: it is
// remembered). label names the snapshot in errors and in the commit.
func (s *Set) Snapshot(repo, base, patch, label string) (string, error) {
	if patch == "" {
		return base, nil
	}
	sum := sha256.Sum256([]byte(patch))
	key := repo + "@" + base + "+" + hex.EncodeToString(sum[:])
	s.mu.Lock()
	id, ok := s.patched[key]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	r, err := s.Repo(repo)
	if err != nil {
		return "", err
	}
	if id, err = r.Patched(base, patch, label); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.patched[key] = id
	s.mu.Unlock()
	return id, nil
}

// CheckCommit reports an error when the repository or commit is missing.
func (s *Set) CheckCommit(_ context.Context, repo, commit string) error {
	if _, err := s.At(repo, commit); err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("unknown repo or commit: %w", err)
		}
		return err
	}
	return nil
}

// ObjectsRead is the number of git objects read from the set's
// repositories since they were opened.
func (s *Set) ObjectsRead() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range s.repos {
		n += r.ObjectsRead()
	}
	return n
}

// Close closes every repository opened so far.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, r := range s.repos {
		errs = append(errs, r.Close())
	}
	s.repos = map[string]*Repo{}
	return errors.Join(errs...)
}

// Package repoindex builds the per-snapshot indexes the agent's tools read:
// the source files of a repository at a commit (straight from git objects),
// the code graph of reference §B.1, search indexes and the commit index.
// Everything here is read-only and deterministic for a snapshot.
package repoindex

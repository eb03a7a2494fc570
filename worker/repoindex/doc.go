// Package repoindex assembles the per-snapshot indexes the agent's tools
// read — the code graph (codegraph), code search (codesearch), the commit
// history (history) and file summaries (summary) — and keeps them in an
// on-disk cache shared by processes, keyed by repository, commit and the
// languages that read it. A snapshot near one already cached is stored as
// an overlay on it, holding only what changed, and answers as a whole
// entry does. Everything is read-only and deterministic for a snapshot.
package repoindex

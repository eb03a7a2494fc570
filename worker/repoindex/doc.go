// Package repoindex assembles the per-snapshot indexes the agent's tools
// read — the code graph (codegraph), code search (codesearch), the commit
// history (history) and file summaries (summary) — and keeps them in an
// on-disk cache shared by processes, keyed by repository, commit and search
// engine. Everything is read-only and deterministic for a snapshot.
package repoindex

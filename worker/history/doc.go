// Package history indexes a repository's commits up to a snapshot (go-git):
// subjects, dates, touched files and patch excerpts, for the commit tool
// and for summaries' edit counts.
package history

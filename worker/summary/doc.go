// Package summary describes each source file of a snapshot for the
// summary tool: structural summaries from the code graph and the commit
// history, or prebuilt ones that an LLM wrote (GenerateSummaries, with a
// resumable journal).
package summary

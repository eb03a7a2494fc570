// Package archtest checks the architecture of the module by machine: the
// layers and import rules of docs/ARCHITECTURE.md (nothing imports cmd/,
// internal/ imports nothing above it), that each language stays behind the
// lang contract with its grammar and its cgo, and that every package has a
// doc comment. It has tests only.
package archtest

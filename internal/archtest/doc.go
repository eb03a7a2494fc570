// Package archtest checks the architecture of the module by machine: the
// layers and import rules of docs/ARCHITECTURE.md, that Python stays behind
// the lang seam, that cgo stays inside internal/pyparse, and that every
// package has a doc comment. It has tests only.
package archtest

// Package archtest checks the architecture of the module by machine: the
// import rules of DESIGN.md §1, that cgo stays inside internal/pyparse, and
// that every package has a doc comment. It has tests only.
package archtest

// Package codegraph reads a snapshot's source files straight from git
// objects and builds the code graph of reference §B.1 from their parsed
// structure: directory, file, class and function nodes; contains, imports,
// invokes and inherits edges; rendering, name tables and fuzzy lookup for
// the tools. It knows languages only through package lang.
package codegraph

// Package python is Python for a2farm's language room: it parses Python source with tree-sitter and extracts the
// structure a2farm needs: classes (nested too), functions and methods with
// their 1-based inclusive line spans, decorators, docstrings, import
// statements with resolved module names, module-level assignments and call
// sites per enclosing definition.
//
// It is the only package in a2farm that uses cgo. Every tree-sitter object it
// creates is closed explicitly: the Go garbage collector cannot see C memory,
// so a missed Close is a leak that only shows up as a growing RSS. The
// package points tree-sitter's allocator back at libc (the official binding
// routes every allocation through a Go callback, which costs about 30%).
//
// A Parser is not safe for concurrent use; give each goroutine its own.
package python

// Package codesearch finds code by text: it splits source files into chunks
// aligned to definitions (as the reference's code splitter does) and ranks
// them with textbook BM25 or bleve's scorch index, and it ranks graph nodes
// by their ids. It knows languages only through package lang.
package codesearch

package python

import "github.com/a2farm/a2farm/lang"

// The parser fills the language-neutral code model of package lang; these
// names keep the parser's code and tests short.
type (
	Span       = lang.Span
	DefKind    = lang.DefKind
	Def        = lang.Def
	Decorator  = lang.Decorator
	Docstring  = lang.Docstring
	Import     = lang.Import
	ImportName = lang.ImportName
	Assignment = lang.Assignment
	Call       = lang.Call
	File       = lang.File
)

// Definition kinds, as in package lang.
const (
	KindClass    = lang.KindClass
	KindFunction = lang.KindFunction
)

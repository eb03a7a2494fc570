package main

import (
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/lang/typescript"
)

// languages is the registry: every language a2farm reads, in the order
// that decides which language reads a file two of them could. A new
// language is its package under lang/ and one line here.
func languages() *lang.Set {
	return lang.NewSet(
		python.Language{},
		golang.Language{},
		typescript.Language{},
	)
}

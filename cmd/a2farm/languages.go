package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/golang"
	"github.com/a2farm/a2farm/lang/java"
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
		java.Language{},
	)
}

// bindLanguages gives a command that reads snapshots --languages: which
// of the registered languages it reads them with.
func (e *env) bindLanguages(cmd *cobra.Command, withRows bool) {
	rule := "default: each dataset row's repo_language or language, Python for a row without one"
	if !withRows {
		rule = "default: python"
	}
	cmd.Flags().StringVar(&e.languageRule, "languages", "",
		"languages to read snapshots with: "+lang.AllLanguages+", or names separated by commas ("+strings.Join(e.languages.Names(), ", ")+"); "+rule)
}

// selection is the run's --languages rule; a bad value is a usage error.
func (e *env) selection() (lang.Selection, error) {
	sel, err := lang.ParseSelection(e.languages, e.languageRule)
	if err != nil {
		return sel, usagef("%v", err)
	}
	return sel, nil
}

// snapshotLanguages are the languages a snapshot named without a dataset
// row is read with: --languages, or Python.
func (e *env) snapshotLanguages() (*lang.Set, error) {
	sel, err := e.selection()
	if err != nil {
		return nil, err
	}
	return sel.Set(), nil
}

// noteUnread says which files of a snapshot the languages it is read with
// leave unread although another registered language reads them — a
// warning when they leave it without a single file, since every tool
// would then find nothing.
func (e *env) noteUnread(snap *gitrepo.Snapshot, set *lang.Set) {
	if set.Len() == e.languages.Len() {
		return
	}
	entries, err := snap.Files(e.languages.Reads)
	if err != nil {
		return // the read that follows reports it
	}
	read := 0
	unread := map[string]int{}
	for _, f := range entries {
		if set.Reads(f.Path) {
			read++
		} else {
			unread[e.languages.Reader(f.Path).Name()]++
		}
	}
	if len(unread) == 0 {
		return
	}
	var others []string
	for _, l := range e.languages.Languages() {
		if n := unread[l.Name()]; n > 0 {
			others = append(others, fmt.Sprintf("%d %s", n, l.Name()))
		}
	}
	ev := e.log.Info()
	if read == 0 {
		ev = e.log.Warn()
	}
	ev.Msgf("read as %s: %d files; %s files left unread (--languages names others, --languages all reads every one)",
		strings.Join(set.Names(), ","), read, strings.Join(others, ", "))
}

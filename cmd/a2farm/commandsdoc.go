package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// writeCommandsDoc writes the command reference, docs/COMMANDS.md, from
// the commands' own help: each command's usage line, its long help and
// its flags, in the order `a2farm help` lists them. A test keeps the file
// equal to what the binary says (go test ./cmd/a2farm -run CommandsDoc
// -update rewrites it), so the reference cannot drift from the help.
func writeCommandsDoc(w io.Writer, root *cobra.Command) error {
	var b strings.Builder
	b.WriteString("# Command reference\n\n")
	b.WriteString("Generated from `a2farm help`; do not edit (`make docs` rewrites it). Every command\n")
	b.WriteString("also takes the global flags:\n\n")
	writeFlags(&b, root.PersistentFlags().FlagUsages())
	b.WriteString("\n| command | what it does |\n|---|---|\n")
	var all []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			all = append(all, sub)
			walk(sub)
		}
	}
	walk(root)
	for _, c := range all {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.CommandPath(), anchor(c.CommandPath()), escapeCell(c.Short))
	}
	for _, c := range all {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", c.CommandPath(), c.Short)
		b.WriteString("```\n" + c.UseLine() + "\n```\n")
		if long := strings.TrimSpace(c.Long); long != "" {
			b.WriteString("\n```\n" + long + "\n```\n")
		}
		if flags := c.LocalNonPersistentFlags().FlagUsages(); strings.TrimSpace(flags) != "" {
			b.WriteString("\n")
			writeFlags(&b, flags)
		}
		if c.HasAvailableSubCommands() {
			b.WriteString("\nSubcommands:")
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					fmt.Fprintf(&b, " [`%s`](#%s)", sub.Name(), anchor(sub.CommandPath()))
				}
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFlags writes cobra's flag table as a preformatted block.
func writeFlags(b *strings.Builder, usages string) {
	b.WriteString("```\n" + strings.TrimRight(usages, "\n") + "\n```\n")
}

// anchor is the heading id GitHub gives "## a2farm index graph".
func anchor(path string) string { return strings.ReplaceAll(strings.ToLower(path), " ", "-") }

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

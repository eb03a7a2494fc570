package main

// Usage errors that name the one bad thing: a mistyped flag or command
// gets a suggestion, a bad value is named with what was wanted, never
// with a parser's words.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError turns pflag's errors into usage errors in words.
func flagError(cmd *cobra.Command, err error) error {
	var unknown *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	var missing *pflag.ValueRequiredError
	switch {
	case errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() == "":
		name := unknown.GetSpecifiedName()
		if near := nearestFlag(cmd, name); near != "" {
			return usagef("unknown flag --%s; did you mean --%s?", name, near)
		}
		return usagef("unknown flag --%s (see a2farm %s --help)", name, cmd.Name())
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return usagef("--%s %q: want %s", f.Name, invalid.GetValue(), wantedValue(f, invalid.Unwrap()))
	case errors.As(err, &missing):
		return usagef("--%s needs a value", missing.GetFlag().Name)
	}
	return &usageError{err}
}

// wantedValue says in words what a flag of f's type takes.
func wantedValue(f *pflag.Flag, cause error) string {
	switch f.Value.Type() {
	case "int", "int64", "int32", "uint", "uint64":
		return "a whole number"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration such as 90s, 5m or 1h30m"
	case "intSlice", "ints":
		return "whole numbers separated by commas"
	}
	if cause != nil {
		return cause.Error() // a2farm's own flag types explain themselves
	}
	return "a " + f.Value.Type()
}

// nearestFlag is the flag of cmd (its own or inherited) closest to a
// mistyped name, or "" when none is close.
func nearestFlag(cmd *cobra.Command, name string) string {
	best, bestDist := "", 3
	visit := func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(strings.ToLower(name), f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = f.Name, d
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// strictArgs makes every argument error a usage error in one line: an
// unknown command (with a suggestion) under a command that has
// subcommands, a stray argument to one that takes none.
func strictArgs(cmd *cobra.Command) {
	switch {
	case cmd.HasSubCommands():
		cmd.SuggestionsMinimumDistance = 2
		// Runnable, so that cobra validates its arguments rather than
		// showing the help for any of them.
		cmd.Args = unknownCommand
		if cmd.Run == nil && cmd.RunE == nil {
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
	case cmd.Args != nil:
		validate := cmd.Args
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := validate(c, args); err != nil {
				return &usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		strictArgs(sub)
	}
}

// unknownCommand refuses any argument to a command that only groups
// subcommands; without one it shows the help.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
		return usagef("%s; did you mean %q?", msg, near[0])
	}
	return usagef("%s (see %s --help)", msg, cmd.CommandPath())
}

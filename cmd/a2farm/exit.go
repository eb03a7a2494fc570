package main

// The exit-code contract, in one place (docs/GUIDE.md, "Exit codes"):
//
//	0    done; or a service (worker, learner, nats) stopped by a signal
//	1    the work failed
//	2    usage or configuration: a bad flag or value, a missing file or
//	     folder, an invalid dataset, a server too old
//	130  a batch command interrupted before its work was done (what
//	     finished is on disk)
//
// Every error reaches the user as one line, "a2farm: ...".

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/coordinator/dataset"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/learner"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// usageError marks bad flags, arguments or configuration.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

// interruptedError is a batch command stopped by a signal before its work
// was done; saved says what finished and where it is.
type interruptedError struct{ saved string }

func (e *interruptedError) Error() string {
	if e.saved == "" {
		return "interrupted"
	}
	return "interrupted; " + e.saved
}

// serviceAnnotation marks a command that runs until it is stopped: a
// signal is how it ends, not a failure.
const serviceAnnotation = "a2farm-service"

func service(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[serviceAnnotation] = "yes"
	return cmd
}

// exitCode maps what a command returned to the process exit code and
// prints the error once, on one line. ctx is the command's context: done
// when a stop was requested.
func exitCode(ctx context.Context, cmd *cobra.Command, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var interrupted *interruptedError
	stopped := ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.As(err, &interrupted))
	if stopped && cmd != nil && cmd.Annotations[serviceAnnotation] != "" {
		fmt.Fprintln(stderr, "a2farm: stopped")
		return exitOK
	}
	if stopped {
		if interrupted == nil {
			interrupted = &interruptedError{}
		}
		fmt.Fprintf(stderr, "a2farm: %s\n", oneLine(interrupted.Error()))
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "a2farm: %s\n", oneLine(explain(err)))
	if isUsage(err) {
		return exitUsage
	}
	return exitError
}

// isUsage reports whether err is the user's to fix before running again:
// the command line, the configuration or the input files.
func isUsage(err error) bool {
	var ue *usageError
	var ce *coordinator.ConfigError
	var le *learner.ConfigError
	var old *bus.ServerTooOldError
	var de *dataset.Error
	return errors.As(err, &ue) || errors.As(err, &ce) || errors.As(err, &le) || errors.As(err, &old) || errors.As(err, &de)
}

// explain adds what the user can do to the errors that have a known
// remedy.
func explain(err error) string {
	msg := err.Error()
	if errors.Is(err, nats.ErrNoServers) {
		msg += "; start a server with `a2farm nats` (or `a2farm up` for a farm in one process), or point --nats (env A2FARM_NATS) at yours"
	}
	return msg
}

// oneLine joins a multi-line cause into one line.
func oneLine(msg string) string {
	lines := strings.FieldsFunc(strings.TrimSpace(msg), func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}

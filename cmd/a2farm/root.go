package main

// The command line: one file per subcommand, each binding its flags to a
// package's Config and calling it. Errors are turned into exit codes here
// and nowhere else.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/internal/progress"
	"github.com/a2farm/a2farm/lang"
)

// env is what every subcommand gets: output streams and the logger.
type env struct {
	stdout, stderr io.Writer
	log            zerolog.Logger
	logLevel       string
	logFormat      string
	// languages are the registered languages (languages.go): the commands
	// choose them, every package below takes them as a value.
	languages *lang.Set
	// languageRule is --languages, of the commands that read snapshots
	// (bindLanguages).
	languageRule string
	// abort is closed by a second stop request: what still runs stops now
	// instead of at the end of its grace (nil: never).
	abort <-chan struct{}
}

// Run executes the command line and returns the process exit code (see
// exit.go). ctx is done at the first stop request: a command takes no new
// work and lets what runs finish within its grace; abort, when not nil,
// is closed by a second: stop now.
func Run(ctx context.Context, abort <-chan struct{}, args []string, stdout, stderr io.Writer) int {
	stderr = &syncWriter{w: stderr}
	e := &env{stdout: stdout, stderr: stderr, languages: languages(), abort: abort}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	return exitCode(ctx, cmd, err, stderr)
}

// CheckArgs reports whether args name an a2farm command and flags it
// accepts, without running anything: deployment files are tested with it.
func CheckArgs(args []string) error {
	root := newRoot(&env{stdout: io.Discard, stderr: io.Discard, languages: languages()})
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root {
		return fmt.Errorf("no a2farm command in %q", args)
	}
	return cmd.ParseFlags(rest)
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "a2farm",
		Short: "Distributed rollout farm for training code-localization agents",
		Long: `a2farm runs code-localization agents over real repositories at scale and turns
their trajectories into weighted training shards (the A²Agent method).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return e.setupLogging()
		},
	}
	root.SetFlagErrorFunc(flagError)
	root.PersistentFlags().StringVar(&e.logLevel, "log-level", envOr("A2FARM_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env A2FARM_LOG_LEVEL)")
	root.PersistentFlags().StringVar(&e.logFormat, "log-format", envOr("A2FARM_LOG_FORMAT", "console"), "log format: console or json (env A2FARM_LOG_FORMAT)")
	root.AddCommand(
		newGoldCmd(e),
		newEvalCmd(e),
		newLocalizeCmd(e),
		newReplayCmd(e),
		newReportCmd(e),
		newExportCmd(e),
		newUpCmd(e),
		newIterateCmd(e),
		newNatsCmd(e),
		newFarmCmd(e),
		newCoordinatorCmd(e),
		newWorkerCmd(e),
		newLearnerCmd(e),
		newStatusCmd(e),
		newJobsCmd(e),
		newIndexCmd(e),
		newToolCmd(e),
		newSampleCmd(e),
		newVersionCmd(e),
	)
	strictArgs(root)
	return root
}

func (e *env) setupLogging() error {
	level, err := zerolog.ParseLevel(strings.ToLower(e.logLevel))
	if err != nil || e.logLevel == "" {
		return usagef("--log-level %q: want debug, info, warn or error", e.logLevel)
	}
	var w io.Writer
	switch e.logFormat {
	case "json":
		w = e.stderr
	case "console":
		w = zerolog.ConsoleWriter{Out: e.stderr, TimeFormat: "15:04:05", NoColor: !progress.IsTerminal(e.stderr)}
	default:
		return usagef("--log-format %q: want console or json", e.logFormat)
	}
	e.log = zerolog.New(w).Level(level).With().Timestamp().Logger()
	return nil
}

// progress returns a callback that draws a progress bar on stderr (created
// on the first report, when the total is known) and a function that ends
// its line.
func (e *env) progress(label string) (report func(done, total int), finish func()) {
	var mu sync.Mutex
	var bar *progress.Bar
	current := func(total int) *progress.Bar {
		mu.Lock()
		defer mu.Unlock()
		if bar == nil && total >= 0 {
			bar = progress.New(e.stderr, label, total)
		}
		return bar
	}
	report = func(done, total int) {
		b := current(total)
		b.SetTotal(total)
		b.Set(done)
	}
	finish = func() {
		if b := current(-1); b != nil {
			b.Finish()
		}
	}
	return report, finish
}

// syncWriter serializes the writes of everything that shares stderr — the
// logger, progress bars and the final error — so that their lines never
// interleave, whatever goroutine writes them.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Unwrap lets progress.IsTerminal see the file underneath.
func (s *syncWriter) Unwrap() io.Writer { return s.w }

// envOr returns the environment variable's value, or def when unset: env
// vars pre-fill flags, flags win.
func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// Command a2farm is the rollout farm for training code-localization agents:
// coordinator, workers, learner and tools in one binary.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/a2farm/a2farm/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

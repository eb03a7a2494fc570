// Command a2farm is the rollout farm for training code-localization agents:
// coordinator, workers, learner and tools in one binary. Each command lives
// in a file of its own here: a flag struct and a plain run function.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command a2farm is the rollout farm for training code-localization agents:
// coordinator, workers and learner, tools and evaluation in one binary.
// Each command lives in a file of its own here: a flag struct and a plain
// run function.
package main

import (
	"os"
	"syscall"
)

func main() {
	stop := listenForStop(os.Interrupt, syscall.SIGTERM)
	code := Run(stop.ctx, stop.abort, os.Args[1:], os.Stdout, os.Stderr)
	stop.release()
	os.Exit(code)
}

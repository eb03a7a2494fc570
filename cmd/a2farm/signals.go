package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
)

// stopRequests are the two phases of stopping a command by signal: the
// first signal cancels ctx (take no new work, let what runs finish within
// the command's grace), the second closes abort (stop now). After the
// second the signals get their default handling back, so a third ends the
// process at once.
type stopRequests struct {
	ctx     context.Context
	abort   <-chan struct{}
	release func()
}

func listenForStop(signals ...os.Signal) stopRequests {
	ctx, cancel := context.WithCancel(context.Background())
	abort := make(chan struct{})
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, signals...)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer signal.Stop(ch)
		for n := 0; n < 2; n++ {
			select {
			case <-ch:
			case <-done:
				return
			}
			if n == 0 {
				cancel()
			} else {
				close(abort)
			}
		}
	}()
	return stopRequests{ctx: ctx, abort: abort, release: func() {
		once.Do(func() { close(done); cancel() })
	}}
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// interruptible returns a context the first SIGINT or SIGTERM cancels, so that a command stops and
// cleans up (a build removes its temporary files, records what finished and writes its timeline), and
// its release. A second signal exits at once with status 130, saying so: work that cannot see the
// context (a read of a terminal or pipe no one writes, an open of a FIFO) would otherwise keep the
// process alive through every further ^C.
func interruptible(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "orkpipe: %v again: exiting now, without cleaning up\n", s)
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

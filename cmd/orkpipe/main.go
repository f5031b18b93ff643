// Command orkpipe builds, publishes and verifies NPU model packs (orkpacks) from GGUF models.
// See README.md and docs/cli.md.
package main

import (
	"orkpipe/internal/blascore"

	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	blascore.Reexec(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(newGlobalOptions(os.Stdout, os.Stderr)).ExecuteContext(ctx)
	code := exitCode(ctx, err, os.Stderr) // before stop(): stop cancels ctx, which would read as an interrupt
	stop()
	os.Exit(code)
}

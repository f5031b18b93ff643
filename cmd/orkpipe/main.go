// Command orkpipe builds, publishes and verifies NPU model packs (orkpacks) from GGUF models.
// See README.md and docs/cli.md.
package main

import (
	"orkpipe/internal/blascore"
	_ "orkpipe/internal/startheap" // short commands only: huge pages for the heap the inits touch, text and rodata mapped at once: ~375 fewer page faults at start

	"os"
)

func main() {
	blascore.Reexec(os.Stderr)
	ctx, stop := interruptible(os.Stderr)
	opts := newGlobalOptions(os.Stdout, os.Stderr)
	err := newRootCommand(opts).ExecuteContext(ctx)
	if perr := opts.finishProfile(); err == nil {
		err = perr
	}
	code := exitCode(ctx, err, os.Stderr) // before stop(): stop cancels ctx, which would read as an interrupt
	stop()
	os.Exit(code)
}

package quant

import (
	"context"
	"fmt"
)

// coresToken is held by the GPTQ phase that runs on every core of the process: a factorisation
// (OpenBLAS's threads under -tags blas, gonum's parallel GEMMs otherwise) or a row phase on more
// than one worker. Two GPTQs of one process (two finalize nodes of a build) then take turns
// phase by phase instead of running twice the threads on the cores: OpenBLAS 0.3.21 shares one
// pool of worker threads between concurrent callers, and a caller whose job waits for a worker
// busy with the other caller's spins (sched_yield) meanwhile. What runs outside the phases (the
// Hessian copy, the error metrics, the stage's reads and writes) still overlaps the other GPTQ's
// phase. Waiting senders are served in turn, so a GPTQ that finished its factorisation queues for
// its rows behind the other's factorisation.
var coresToken = make(chan struct{}, 1)

// holdCores waits for coresToken (or ctx) and returns the function that gives it back.
func holdCores(ctx context.Context) (func(), error) {
	select {
	case coresToken <- struct{}{}:
		return func() { <-coresToken }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// onCores runs f holding coresToken; waiting for it ends with ctx's error wrapped with name.
func onCores(ctx context.Context, name string, f func() error) error {
	release, err := holdCores(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer release()
	return f()
}

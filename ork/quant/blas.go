//go:build blas

package quant

// Built with -tags blas (cgo, Debian's libopenblas-dev), every gonum BLAS call — the GPTQ lazy
// batch updates, the Hessian accumulation, the reference matmuls — runs on OpenBLAS instead of
// gonum's pure-Go kernels, and GPTQ's factorisations (cholesky.go: Cholesky of the reflected H
// and the inverse of its factor) are OpenBLAS's own LAPACK dpotrf/dpocon/dtrtri, cancellable
// between those calls. The results equal the pure-Go build's to float tolerance (summation order
// differs), which TestBLASMatchesPureGo checks against a golden file recorded by the pure-Go build.
// The cgo bindings live in ork/quant/lapack (a cgo package may not hold this package's assembly).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"orkpipe/ork/quant/lapack"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// BLASBackend names the BLAS implementation this build uses.
const BLASBackend = "openblas"

func init() {
	blas64.Use(netlib.Implementation{})
	blas32.Use(netlib.Implementation{}) // the forward passes' float32 products (ork/model) too
	steps = lapackSteps
	BLASThreads() // read before anything changes it
}

// OpenBLASCore returns the name of the kernel set OpenBLAS chose when it was loaded ("Prescott",
// "SkylakeX", ...; see [OpenBLASCoreAdvice]).
func OpenBLASCore() string { return lapack.CoreName() }

// BLASLibrary returns the path of the OpenBLAS shared library this process has loaded (the file
// mapped into it, from /proc/self/maps: Debian's libopenblas.so.0 is a symlink chain to it). Its
// bytes and the kernel set it chose decide the float results of every BLAS call.
func BLASLibrary() (string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", fmt.Errorf("finding the loaded OpenBLAS library: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && strings.HasPrefix(filepath.Base(fields[5]), "libopenblas") {
			return fields[5], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("finding the loaded OpenBLAS library: /proc/self/maps: %w", err)
	}
	return "", fmt.Errorf("finding the loaded OpenBLAS library: no libopenblas file is mapped into this process (/proc/self/maps)")
}

// lapackSteps are OpenBLAS's LAPACK routines for invCholUpper. A row-major upper triangle is a
// column-major lower one with the same leading dimension, hence uplo 'L' throughout. Each runs on
// BLASThreads() threads whatever else runs (atBLASThreads): OpenBLAS's factorisations give other
// bits on another thread count (40% of a 4096-wide factor's values differ between 1 and 2 threads),
// and a GPTQ row phase in another node makes OpenBLAS single-threaded while it runs.
var lapackSteps = factorSteps{
	potrf: func(ctx context.Context, a []float64, n int) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		info := atBLASThreads(func() int { return lapack.Dpotrf('L', a, n) })
		return info == 0, lapackArg("dpotrf", info)
	},
	pocon: func(a []float64, n int, anorm float64) (float64, error) {
		var rc float64
		info := atBLASThreads(func() (info int) { rc, info = lapack.Dpocon('L', a, n, anorm); return info })
		return rc, lapackArg("dpocon", info)
	},
	trtri: func(ctx context.Context, a []float64, n int) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		info := atBLASThreads(func() int { return lapack.Dtrtri('L', a, n) })
		return info == 0, lapackArg("dtrtri", info)
	},
}

// BLASThreads is the number of threads OpenBLAS had when this package first touched it (its
// OPENBLAS_NUM_THREADS, else one per CPU): the thread count of every factorisation, and part of
// the build's numerics (stages.Numerics).
func BLASThreads() int { return configuredThreads() }

var configuredThreads = sync.OnceValue(func() int { return int(lapack.Threads()) })

// atBLASThreads runs call with OpenBLAS on BLASThreads() threads, excluding any change of the thread
// count meanwhile (a GPTQ row phase starting or ending in another node waits), then puts back the
// count the open single-threaded scopes want.
func atBLASThreads(call func() int) int {
	serialMu.Lock()
	defer serialMu.Unlock()
	lapack.SetThreads(BLASThreads())
	defer func() {
		if serialBLAS > 0 {
			lapack.SetThreads(1)
		}
	}()
	return call()
}

// lapackArg turns a negative LAPACK info (argument -info was illegal: a bug here) into an error;
// a positive info is the routine's numerical answer, for the caller.
func lapackArg(routine string, info int) error {
	if info < 0 {
		return fmt.Errorf("%s: argument %d illegal", routine, -info)
	}
	return nil
}

// serialBLAS counts the GPTQ row phases running (singleThreadedBLAS); OpenBLAS runs one thread
// per call while it is positive (a factorisation excepted: atBLASThreads) and BLASThreads()
// otherwise.
var (
	serialMu   sync.Mutex
	serialBLAS int
)

// singleThreadedBLAS makes OpenBLAS single-threaded until the returned function is called. GPTQ's
// row phase runs one GEMM per row chunk on every core already: OpenBLAS threads on top of that
// oversubscribe the cores and spin-wait between calls (measured at K = 4096: 5.27 s CPU for the
// row phase with 2 OpenBLAS threads, 3.47 s with 1). The setting is process-wide: a factorisation
// running meanwhile in another GPTQ (another node) is single-threaded too — the cores are busy
// with this one's rows.
func singleThreadedBLAS() func() {
	serialMu.Lock()
	defer serialMu.Unlock()
	if serialBLAS == 0 {
		lapack.SetThreads(1)
	}
	serialBLAS++
	return func() {
		serialMu.Lock()
		defer serialMu.Unlock()
		if serialBLAS--; serialBLAS == 0 {
			lapack.SetThreads(BLASThreads())
		}
	}
}

// SingleThreadedBLAS is singleThreadedBLAS for a caller outside this package that fans its products
// out over Go workers itself (the calibrate node: ork/calib); [BLASSingleThreaded] reports whether
// such a scope (or a GPTQ row phase) is open.
func SingleThreadedBLAS() func() { return singleThreadedBLAS() }

// BLASSingleThreaded reports whether OpenBLAS runs each call on one thread now (a
// [SingleThreadedBLAS] scope or a GPTQ row phase is open), so a caller may run calls concurrently.
func BLASSingleThreaded() bool {
	serialMu.Lock()
	defer serialMu.Unlock()
	return serialBLAS > 0
}

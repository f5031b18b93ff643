//go:build !blas

package quant

import (
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/internal/dgemm"
)

// The pure-Go build's float64 BLAS is gonum's with ork/internal/dgemm's Dgemm, Dtrmm and Dsyrk: the same
// bits as gonum's own (GPTQ's block updates, the Cholesky and inverse panels, calibration's Hessians),
// on AVX-512/AVX2 kernels.
func init() { blas64.Use(dgemm.Implementation{}) }

// BLASBackend names the BLAS implementation this build uses: gonum's pure-Go kernels unless
// built with -tags blas (see blas.go).
const BLASBackend = "gonum"

// OpenBLASCore returns "" in the pure-Go build (no OpenBLAS is linked).
func OpenBLASCore() string { return "" }

// BLASLibrary returns "" in the pure-Go build (no BLAS library is loaded).
func BLASLibrary() (string, error) { return "", nil }

// BLASThreads returns 0 in the pure-Go build (no BLAS threads).
func BLASThreads() int { return 0 }

// singleThreadedBLAS does nothing in the pure-Go build (gonum's BLAS runs on the calling goroutine).
func singleThreadedBLAS() func() { return func() {} }

// SingleThreadedBLAS does nothing in the pure-Go build.
func SingleThreadedBLAS() func() { return func() {} }

// BLASSingleThreaded reports false in the pure-Go build: gonum's kernels parallelize themselves.
func BLASSingleThreaded() bool { return false }

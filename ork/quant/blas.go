//go:build blas

package quant

// Built with -tags blas (cgo, Debian's libopenblas-dev), every gonum BLAS call — the GPTQ lazy
// batch updates, the Hessian accumulation, the reference matmuls, and the panel updates of GPTQ's
// in-place blocked factorisations (cholesky.go: Cholesky of H, inverse, Cholesky of the inverse;
// cancellable between blocks) — runs on OpenBLAS instead of gonum's pure-Go kernels. The results
// equal the pure-Go build's to float tolerance (summation order differs), which
// TestBLASMatchesPureGo checks against a golden file recorded by the pure-Go build.

// #cgo LDFLAGS: -lopenblas
import "C"

import (
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// BLASBackend names the BLAS implementation this build uses.
const BLASBackend = "openblas"

func init() { blas64.Use(netlib.Implementation{}) }

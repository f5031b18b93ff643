//go:build blas

package quant

// Built with -tags blas (cgo, Debian's libopenblas-dev), every gonum BLAS call — the GPTQ lazy
// batch updates, the Hessian accumulation, the reference matmuls and, through gonum's LAPACK,
// the Cholesky factorisations — runs on OpenBLAS instead of gonum's pure-Go kernels. The
// results equal the pure-Go build's to float tolerance (summation order differs), which
// TestBLASMatchesPureGo checks against values recorded in testdata.

/*
#cgo LDFLAGS: -lopenblas
*/
import "C"

import (
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// BLASBackend names the BLAS implementation this build uses.
const BLASBackend = "openblas"

func init() { blas64.Use(netlib.Implementation{}) }

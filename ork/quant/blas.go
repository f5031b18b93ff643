//go:build blas

package quant

// Built with -tags blas (cgo, Debian's libopenblas-dev), every gonum BLAS call — the GPTQ lazy
// batch updates, the Hessian accumulation, the reference matmuls — runs on OpenBLAS instead of
// gonum's pure-Go kernels, and GPTQ's factorisations (cholesky.go: Cholesky of H, inverse,
// Cholesky of the inverse) are OpenBLAS's own LAPACK dpotrf/dtrtri/dlauum/dpocon, cancellable
// between those calls. The results equal the pure-Go build's to float tolerance (summation order
// differs), which TestBLASMatchesPureGo checks against a golden file recorded by the pure-Go build.

// #cgo LDFLAGS: -lopenblas
// char* openblas_get_corename(void);
// void dpotrf_(char* uplo, int* n, double* a, int* lda, int* info);
// #include <stddef.h>
// void dpocon_(char* uplo, int* n, double* a, int* lda, double* anorm, double* rcond, double* work, int* iwork, int* info, size_t uplo_len);
// void dtrtri_(char* uplo, char* diag, int* n, double* a, int* lda, int* info);
// void dlauum_(char* uplo, int* n, double* a, int* lda, int* info);
import "C"

import (
	"context"
	"fmt"

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
}

// OpenBLASCore returns the name of the kernel set OpenBLAS chose when it was loaded ("Prescott",
// "SkylakeX", ...; see [OpenBLASCoreAdvice]).
func OpenBLASCore() string { return C.GoString(C.openblas_get_corename()) }

// lapackSteps are OpenBLAS's LAPACK routines for invCholUpper. A row-major upper triangle is a
// column-major lower one with the same leading dimension, hence uplo 'L' throughout.
var lapackSteps = factorSteps{
	potrf: func(ctx context.Context, a []float64, n int) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		uplo, nn, info := C.char('L'), C.int(n), C.int(0)
		C.dpotrf_(&uplo, &nn, (*C.double)(&a[0]), &nn, &info)
		return info == 0, lapackArg("dpotrf", info)
	},
	pocon: func(a []float64, n int, anorm float64) (float64, error) {
		uplo, nn, info := C.char('L'), C.int(n), C.int(0)
		an, rc := C.double(anorm), C.double(0)
		work, iwork := make([]C.double, 3*n), make([]C.int, n)
		C.dpocon_(&uplo, &nn, (*C.double)(&a[0]), &nn, &an, &rc, &work[0], &iwork[0], &info, 1) // 1: gfortran's hidden length of uplo
		return float64(rc), lapackArg("dpocon", info)
	},
	trtri: func(ctx context.Context, a []float64, n int) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		uplo, diag, nn, info := C.char('L'), C.char('N'), C.int(n), C.int(0)
		C.dtrtri_(&uplo, &diag, &nn, (*C.double)(&a[0]), &nn, &info)
		return info == 0, lapackArg("dtrtri", info)
	},
	lauum: func(ctx context.Context, a []float64, n int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		uplo, nn, info := C.char('L'), C.int(n), C.int(0)
		C.dlauum_(&uplo, &nn, (*C.double)(&a[0]), &nn, &info)
		return lapackArg("dlauum", info)
	},
}

// lapackArg turns a negative LAPACK info (argument -info was illegal: a bug here) into an error;
// a positive info is the routine's numerical answer, for the caller.
func lapackArg(routine string, info C.int) error {
	if info < 0 {
		return fmt.Errorf("%s: argument %d illegal", routine, -info)
	}
	return nil
}

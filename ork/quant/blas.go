//go:build blas

package quant

// Built with -tags blas (cgo, Debian's libopenblas-dev), every gonum BLAS call — the GPTQ lazy
// batch updates, the Hessian accumulation, the reference matmuls — runs on OpenBLAS instead of
// gonum's pure-Go kernels, and GPTQ's three factorisations (Cholesky of H, inverse, Cholesky of
// the inverse) call OpenBLAS's LAPACK dpotrf/dpotri. The results equal the pure-Go build's to
// float tolerance (summation order differs), which TestBLASMatchesPureGo checks against a golden
// file recorded by the pure-Go build.

/*
#cgo LDFLAGS: -lopenblas
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
void dpotri_(const char *uplo, const int *n, double *a, const int *lda, int *info);

static int ork_potrf_lower(int n, double *a) {
	int info = 0;
	char uplo = 'L';
	dpotrf_(&uplo, &n, a, &n, &info);
	return info;
}

static int ork_potri_lower(int n, double *a) {
	int info = 0;
	char uplo = 'L';
	dpotri_(&uplo, &n, a, &n, &info);
	return info;
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// BLASBackend names the BLAS implementation this build uses.
const BLASBackend = "openblas"

func init() { blas64.Use(netlib.Implementation{}) }

// invCholUpper returns the upper Cholesky factor U of A⁻¹ (A⁻¹ = UᵀU, row-major) for symmetric
// positive definite A, in place of A. A symmetric row-major matrix is the same array in
// column-major order, and a column-major lower factor L (A⁻¹ = L·Lᵀ) read row-major is U = Lᵀ,
// so: dpotrf('L'), dpotri('L'), dpotrf('L'), then clear the row-major lower triangle.
func invCholUpper(a []float64, k int) ([]float64, error) {
	if k == 0 {
		return a, nil
	}
	if k > math.MaxInt32 || len(a) != k*k {
		return nil, fmt.Errorf("factorisation of %d values as %d x %d", len(a), k, k)
	}
	p := (*C.double)(unsafe.Pointer(&a[0]))
	if info := C.ork_potrf_lower(C.int(k), p); info != 0 {
		return nil, fmt.Errorf("H + damp·I is not positive definite (dpotrf info %d)", int(info))
	}
	if info := C.ork_potri_lower(C.int(k), p); info != 0 {
		return nil, fmt.Errorf("inverting H: dpotri info %d", int(info))
	}
	if info := C.ork_potrf_lower(C.int(k), p); info != 0 {
		return nil, fmt.Errorf("H⁻¹ is not positive definite (dpotrf info %d)", int(info))
	}
	for i := 0; i < k; i++ {
		clear(a[i*k : i*k+i])
	}
	for i, v := range a {
		if v != v {
			return nil, fmt.Errorf("factor of H⁻¹ has NaN at (%d,%d)", i/k, i%k)
		}
	}
	return a, nil
}

//go:build blas

package lapack

// #cgo LDFLAGS: -lopenblas
// char* openblas_get_corename(void);
// void openblas_set_num_threads(int);
// int openblas_get_num_threads(void);
// void dpotrf_(char* uplo, int* n, double* a, int* lda, int* info);
// #include <stddef.h>
// void dpocon_(char* uplo, int* n, double* a, int* lda, double* anorm, double* rcond, double* work, int* iwork, int* info, size_t uplo_len);
// void dtrtri_(char* uplo, char* diag, int* n, double* a, int* lda, int* info);
import "C"

// CoreName returns the name of the kernel set OpenBLAS chose when it was loaded ("Prescott",
// "SkylakeX", ...).
func CoreName() string { return C.GoString(C.openblas_get_corename()) }

// Threads returns the number of threads OpenBLAS runs a call on.
func Threads() int { return int(C.openblas_get_num_threads()) }

// SetThreads sets the number of threads OpenBLAS runs a call on (process-wide).
func SetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Dpotrf is LAPACK's Cholesky factorisation of the n x n matrix a (leading dimension n) in its uplo
// triangle; it returns LAPACK's info.
func Dpotrf(uplo byte, a []float64, n int) int {
	u, nn, info := C.char(uplo), C.int(n), C.int(0)
	C.dpotrf_(&u, &nn, (*C.double)(&a[0]), &nn, &info)
	return int(info)
}

// Dpocon is LAPACK's reciprocal condition number estimate of a Cholesky-factored n x n matrix a whose
// 1-norm before factoring was anorm; it returns the estimate and LAPACK's info.
func Dpocon(uplo byte, a []float64, n int, anorm float64) (float64, int) {
	u, nn, info := C.char(uplo), C.int(n), C.int(0)
	an, rc := C.double(anorm), C.double(0)
	work, iwork := make([]C.double, 3*n), make([]C.int, n)
	C.dpocon_(&u, &nn, (*C.double)(&a[0]), &nn, &an, &rc, &work[0], &iwork[0], &info, 1) // 1: gfortran's hidden length of uplo
	return float64(rc), int(info)
}

// Dtrtri is LAPACK's inverse of the n x n triangular matrix a (its uplo triangle, non-unit diagonal);
// it returns LAPACK's info.
func Dtrtri(uplo byte, a []float64, n int) int {
	u, diag, nn, info := C.char(uplo), C.char('N'), C.int(n), C.int(0)
	C.dtrtri_(&u, &diag, &nn, (*C.double)(&a[0]), &nn, &info)
	return int(info)
}

// Package lapack binds the few OpenBLAS routines ork/quant calls directly under -tags blas (cgo,
// Debian's libopenblas-dev): the name of the kernel set OpenBLAS chose and LAPACK's dpotrf, dpocon
// and dtrtri on column-major matrices. It is a package of its own because a package using cgo
// may not hold Go assembly, and ork/quant does (its clip kernel). Built without the tag it is empty.
package lapack

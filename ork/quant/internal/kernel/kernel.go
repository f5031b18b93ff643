// Package kernel holds ork/quant's AVX2 and AVX-512 kernels (Go assembly cannot live in a cgo package, and
// ork/quant uses cgo with -tags blas). Each computes exactly what its pure-Go reference in
// ork/quant computes — bit for bit; ork/quant's tests check that.
package kernel

//go:build !blas

package quant

// BLASBackend names the BLAS implementation this build uses: gonum's pure-Go kernels unless
// built with -tags blas (see blas.go).
const BLASBackend = "gonum"

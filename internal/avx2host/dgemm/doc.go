// Package dgemm holds TestDgemmWithoutAVX512: the float64 products' AVX2 kernels (GPTQ, the Cholesky,
// the Hessians), run on a CPU without AVX-512 (internal/avx2host).
package dgemm

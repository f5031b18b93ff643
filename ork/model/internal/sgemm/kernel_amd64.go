package sgemm

import "golang.org/x/sys/cpu"

// available says whether the AVX2 kernels may run (x/sys/cpu also checks that the OS saves the YMM
// registers).
var available = cpu.X86.HasAVX2

// kernel2x4 adds to the 2×4 outputs at c (rows c and c+ldc, four values each) the products of the two
// rows of A at a (a and a+lda) with the four rows of B at b (b, b+ldb, b+2·ldb, b+3·ldb), summed as
// dot sums them over each slice of k (k/slice slices of slice values and the rest): each row of B on a
// 16-byte boundary, k and slice positive multiples of 16; each slice's sum is added to c in order.
//
//go:noescape
func kernel2x4(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int)

// kernel1x4 is kernel2x4 for one row of A.
//
//go:noescape
func kernel1x4(a *float32, b *float32, ldb int, c *float32, k, slice int)

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

// available512 says whether kernel4x4z may run: AVX-512 F, DQ (the eight-value broadcasts and
// inserts) and VL (the EVEX forms of the 128-bit registers X16-X31).
var available512 = available && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL

// kernel4x4z is kernel2x4 for four rows of A, on AVX-512: the same sums for every output.
//
//go:noescape
func kernel4x4z(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int)

// kernel4x8p is kernel4x4z for 4×8 outputs, from eight rows of B packed by pack: for each eight values
// of the rows, rows 0 and 1's, 2 and 3's, 4 and 5's, 6 and 7's, each pair as two runs of eight (256
// bytes an eight). Its outputs are 4×8 values of C (rows ldc apart), summed as kernel4x4z sums them.
//
//go:noescape
func kernel4x8p(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int)

// pack8 writes the first k values (a positive multiple of eight) of the eight rows of B at b (ldb
// apart) to dst as kernel4x8p reads them: 8·k values, the rows' eights in turn.
//
//go:noescape
func pack8(dst *float32, b *float32, ldb int, k int)

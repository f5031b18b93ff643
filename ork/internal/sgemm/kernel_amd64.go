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

// kernel3x4p is kernel2x4 for 3×4 outputs, from four rows of B packed by pack4: each output's eight
// lanes in two registers, four lanes a register, two outputs a register (packed4_amd64.s). Its outputs
// are 3×4 values of C (rows ldc apart), summed as kernel2x4 sums them. When next is not nil, the three
// rows of A there (lda apart; k values each) are prefetched as it runs. AVX2.
//
//go:noescape
func kernel3x4p(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32)

// kernel1x4p is kernel3x4p for one row of A.
//
//go:noescape
func kernel1x4p(a *float32, pb *float32, c *float32, k, slice int)

// pack4 writes the first k values (a positive multiple of eight) of the four rows of B at b (ldb
// apart) to dst as kernel3x4p reads them, 4·k values: for each four positions 4q..4q+3, rows 0 and
// 2's values there, then rows 1 and 3's.
//
//go:noescape
func pack4(dst *float32, b *float32, ldb int, k int)

// available512 says whether kernel4x4z may run: AVX-512 F, DQ (the eight-value broadcasts and
// inserts) and VL (the EVEX forms of the 128-bit registers X16-X31).
var available512 = available && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL

// kernel4x4z is kernel2x4 for four rows of A, on AVX-512: the same sums for every output.
//
//go:noescape
func kernel4x4z(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int)

// kernel3x16 is kernel4x4z for 3×16 outputs, from sixteen rows of B packed by pack16: each output's
// eight lanes in four registers, two lanes a register, eight outputs a register (the file's doc).
// Its outputs are 3×16 values of C (rows ldc apart), summed as kernel4x4z sums them. When next is
// not nil, the three rows of A there (lda apart; k values each) are prefetched as it runs.
//
//go:noescape
func kernel3x16(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32)

// kernel1x16 is kernel3x16 for one row of A.
//
//go:noescape
func kernel1x16(a *float32, pb *float32, c *float32, k, slice int)

// pack16 writes the first k values (a positive multiple of eight) of the sixteen rows of B at b (ldb
// apart) to dst as kernel3x16 reads them, 16·k values: for each pair of positions (2q, 2q+1), the
// pairs of rows 0, 1, 4, 5, 8, 9, 12 and 13 in that order (group 0), then of rows 2, 3, 6, 7, 10, 11,
// 14 and 15 (group 1).
//
//go:noescape
func pack16(dst *float32, b *float32, ldb int, k int)

// nn16 sets the columns of c selected by mask (bit j: column j, within the first 16) to the sum over
// l < k of the rounded products b_l·a_l (b_l the row of B at b + l·ldb) for every a_l (the values at
// a) that is not ±0, in order from +0, as gonum's Sgemm(NoTrans, NoTrans, ...) sums them (nn.go).
// Columns outside mask are neither read nor written. AVX-512 F.
//
//go:noescape
func nn16(a *float32, k int, b *float32, ldb int, c *float32, mask uint64)

// nn64 is nn16 for the first 64 columns.
//
//go:noescape
func nn64(a *float32, k int, b *float32, ldb int, c *float32, mask uint64)

// nn32 is nn16 for the first 32 columns, all of them, in YMM registers. AVX2.
//
//go:noescape
func nn32(a *float32, k int, b *float32, ldb int, c *float32)

// nn8 is nn16 for the columns among the first eight whose lanes in mask (eight int32s, each all ones
// or zero) are set, in a YMM register: the others are neither read nor written. AVX2.
//
//go:noescape
func nn8(a *float32, k int, b *float32, ldb int, c *float32, mask *int32)

// dotT16 adds to the sixteen values at c one slice's sums of the row of A at a with sixteen rows of
// B packed by packT at pb, each summed as DotUnitary sums it for rows at a common alignment whose
// plan is tr, n16, n4, n1 (transposed.go). AVX-512 F.
//
//go:noescape
func dotT16(a *float32, pb *float32, c *float32, tr, n16, n4, n1 int)

// dotT8 is dotT16 for eight rows of B packed by packT (g = 8). AVX2.
//
//go:noescape
func dotT8(a *float32, pb *float32, c *float32, tr, n16, n4, n1 int)

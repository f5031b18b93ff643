package dgemm

import "golang.org/x/sys/cpu"

// has4x8 and has8x16 say which kernels may run: tile4x8 on AVX2, tile8x16 on AVX-512 (x/sys/cpu also
// checks that the OS saves the registers). Variables so that tests run every path the CPU has.
var (
	has4x8  = cpu.X86.HasAVX2
	has8x16 = cpu.X86.HasAVX2 && cpu.X86.HasAVX512F
)

// tile4x8 adds to the 4×8 values at c (rows ldc apart), for l = 0..t-1 in order, tmp·b[l·ldb+j] where
// tmp = alpha·a[i·ai+l·al] is not zero: gonum's Dgemm sums (see kernel_amd64.s). With zeros false
// the caller promises that none of the tile's a values is zero, and for alpha 1 and -1 the kernel
// skips no product, without the per-row compare and branch.
//
//go:noescape
func tile4x8(a *float64, ai, al int, b *float64, ldb, t int, c *float64, ldc int, alpha float64, zeros bool)

// tile8x16 is tile4x8 for 8×16 values, on AVX-512, b's values 8-15 of token l at b[l·ldb+bhi+j]
// (bhi 8 where a token's 16 values are consecutive). With zeros false the caller promises that none of
// the tile's a values is zero (nonzero8), and for alpha 1 and -1 (where tmp is zero only for a zero a)
// the kernel skips no product, without the per-row compare and mask.
//
//go:noescape
func tile8x16(a *float64, ai, al int, b *float64, ldb, bhi, t int, c *float64, ldc int, alpha float64, zeros bool)

// nonzero8 reports whether the 8×t values a[r·ai + l·al] (r < 8, l < t; ai or al is 1) are all
// nonzero: neither +0 nor −0 (a NaN is nonzero, as the kernels' compare has it). AVX-512.
//
//go:noescape
func nonzero8(a *float64, ai, al, t int) bool

// nonzero4 is nonzero8 for 4 rows (a[r·ai + l·al], r < 4), on AVX2.
//
//go:noescape
func nonzero4(a *float64, ai, al, t int) bool

// prefetch8x16 asks for the 8×16 values at c (rows ldc apart) to be brought to L1: in each row the
// cache lines holding its first value and the value 64 bytes on (the whole row of 16 when c is on a
// 64-byte boundary). A hint: it never faults and changes no value.
//
//go:noescape
func prefetch8x16(c *float64, ldc int)

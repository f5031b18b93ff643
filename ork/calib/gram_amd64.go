package calib

import "golang.org/x/sys/cpu"

// hasGramKernel: the pure-Go Hessian update runs gramTile4x8 (AVX2); hasGram512: and gramTile8x16
// (AVX-512) where the tiles are whole. Variables so that tests run every path the host can.
var (
	hasGramKernel = cpu.X86.HasAVX2
	hasGram512    = cpu.X86.HasAVX512F
)

// gramTile4x8 adds to the 4×8 values at c (rows ldc apart) Σ_l a_l[i]·b_l[j] in order l = 0..t-1,
// a_l = a + l·ldx and b_l = b + l·ldx, skipping a zero a_l[i] (gonum's Dgemm(Trans, NoTrans) order).
//
//go:noescape
func gramTile4x8(a, b *float64, ldx, t int, c *float64, ldc int)

// gramTile8x16 is gramTile4x8's sums for an 8×16 tile, on AVX-512.
//
//go:noescape
func gramTile8x16(a, b *float64, ldx, t int, c *float64, ldc int)

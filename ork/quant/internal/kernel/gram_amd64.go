package kernel

import "golang.org/x/sys/cpu"

// AvailableFMA says whether GramTile8 and MulTile8 may run: AVX2 with FMA3.
var AvailableFMA = Available && cpu.X86.HasFMA

// GramTile16 forms one block pair's entry of sixteen rows' Gram matrices (AVX-512), a row in each
// lane: for r < 16,
//
//	out[r] = Σ_{j < gw} (Σ_{i < gi} ci[i·cs + r]·h[i·hs + j]) · cj[j·cs + r]
//
// each inner sum a chain of fused multiply-adds over i in order from 0 (starting from +0), the
// outer one a chain of fused multiply-adds over j in order from +0: ork/quant's gramTileGo, bit
// for bit. h is a gi x gw block of row stride hs; ci and cj hold columns of codes, a column per i
// (or j) at stride cs, a row per lane. gi positive, gw a positive multiple of 8.
//
//go:noescape
func GramTile16(h *float64, hs, gi, gw int, ci, cj *float64, cs int, out *float64)

// GramTile8 is GramTile16 for eight rows (AVX2 and FMA3), gw a positive multiple of 4: the same
// arithmetic in each lane, so the same bits.
//
//go:noescape
func GramTile8(h *float64, hs, gi, gw int, ci, cj *float64, cs int, out *float64)

// MulTile16 adds a block's product to sixteen rows' outputs (AVX-512), a row in each lane: for
// r < 16 and j < gw,
//
//	y[j·cs + r] = fma(ci[(gi−1)·cs + r], h[(gi−1)·hs + j], … fma(ci[r], h[j], y[j·cs + r]))
//
// a chain of fused multiply-adds over i in order from the value y holds: ork/quant's mulTileGo, bit
// for bit. h is a gi x gw block of row stride hs; ci and y hold columns, a column per i (or j) at
// stride cs, a row per lane. gi positive, gw a positive multiple of 8.
//
//go:noescape
func MulTile16(h *float64, hs, gi, gw int, ci, y *float64, cs int)

// MulTile8 is MulTile16 for eight rows (AVX2 and FMA3), gw a positive multiple of 4.
//
//go:noescape
func MulTile8(h *float64, hs, gi, gw int, ci, y *float64, cs int)
